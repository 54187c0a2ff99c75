import queue
import threading


class Worker:
    def __init__(self, handler, num_threads=4):
        self.handler = handler
        self.tasks = queue.Queue()
        self.results = []
        self.lock = threading.Lock()
        self.threads = []
        for i in range(num_threads):
            t = threading.Thread(target=self.run, daemon=True)
            self.threads.append(t)

    def start(self):
        for t in self.threads:
            t.start()

    def submit(self, item):
        self.tasks.put(item)

    def run(self):
        while True:
            item = self.tasks.get()
            if item is None:
                break
            result = self.handler(item)
            self.results.append(result)
            self.tasks.task_done()

    def stop(self):
        for t in self.threads:
            self.tasks.put(None)
        for t in self.threads:
            t.join()
