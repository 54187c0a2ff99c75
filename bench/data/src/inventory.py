class Inventory:
    def __init__(self):
        self.items = {}

    def add(self, name, quantity, price):
        if quantity <= 0:
            raise ValueError("quantity must be positive")
        if name in self.items:
            self.items[name]["quantity"] += quantity
            self.items[name]["price"] = price
        else:
            self.items[name] = {"quantity": quantity, "price": price}

    def remove(self, name, quantity):
        if name not in self.items:
            raise KeyError(name)
        item = self.items[name]
        if item["quantity"] < quantity:
            raise ValueError("not enough stock")
        item["quantity"] -= quantity
        if item["quantity"] == 0:
            del self.items[name]

    def total_value(self):
        total = 0
        for name in self.items:
            total += self.items[name]["quantity"] * self.items[name]["price"]
        return total

    def low_stock(self, threshold):
        result = []
        for name, item in self.items.items():
            if item["quantity"] < threshold:
                result.append(name)
        return sorted(result)
