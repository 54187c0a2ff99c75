import time
import urllib.error
import urllib.request


def fetch(url, retries=3, backoff=0.5, timeout=10):
    last_error = None
    for attempt in range(retries):
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                return response.read().decode("utf-8")
        except urllib.error.HTTPError as e:
            if e.code < 500:
                raise
            last_error = e
        except urllib.error.URLError as e:
            last_error = e
        time.sleep(backoff * 2 ** attempt)
    raise RuntimeError(f"giving up on {url}") from last_error


def fetch_all(urls, retries=3):
    results = {}
    for url in urls:
        try:
            results[url] = fetch(url, retries=retries)
        except Exception as e:
            results[url] = None
    return results
