class TodoList {
  constructor() {
    this.items = [];
    this.nextId = 1;
  }

  add(title) {
    const item = { id: this.nextId, title: title, done: false };
    this.nextId += 1;
    this.items.push(item);
    return item;
  }

  complete(id) {
    for (let i = 0; i < this.items.length; i++) {
      if (this.items[i].id === id) {
        this.items[i].done = true;
        return true;
      }
    }
    return false;
  }

  remaining() {
    let count = 0;
    for (let i = 0; i < this.items.length; i++) {
      if (!this.items[i].done) {
        count++;
      }
    }
    return count;
  }

  titles() {
    const result = [];
    for (let i = 0; i < this.items.length; i++) {
      result.push(this.items[i].title);
    }
    return result;
  }
}

module.exports = { TodoList };
