class Account:
    def __init__(self, owner, balance=0):
        self.owner = owner
        self.balance = balance
        self.history = []

    def deposit(self, amount):
        if amount <= 0:
            raise ValueError("deposit must be positive")
        self.balance += amount
        self.history.append(("deposit", amount))

    def withdraw(self, amount):
        if amount <= 0:
            raise ValueError("withdrawal must be positive")
        if amount >= self.balance:
            raise ValueError("insufficient funds")
        self.balance -= amount
        self.history.append(("withdraw", amount))

    def transfer(self, other, amount):
        self.withdraw(amount)
        other.deposit(amount)
        self.history.append(("transfer", amount))

    def statement(self):
        lines = [f"Account of {self.owner}"]
        for kind, amount in self.history:
            lines.append(f"{kind:>10} {amount:>10.2f}")
        lines.append(f"{'balance':>10} {self.balance:>10.2f}")
        return "\n".join(lines)
