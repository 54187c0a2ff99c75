import csv


def read_rows(path):
    rows = []
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        for row in reader:
            rows.append(row)
    return rows


def summarize(rows, key, value):
    totals = {}
    counts = {}
    for row in rows:
        group = row[key]
        amount = float(row[value])
        totals[group] = totals.get(group, 0.0) + amount
        counts[group] = counts.get(group, 0) + 1
    summary = []
    for group in sorted(totals):
        summary.append((group, totals[group], totals[group] / counts[group]))
    return summary


def write_summary(summary, path):
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["group", "total", "mean"])
        for group, total, mean in summary:
            writer.writerow([group, f"{total:.2f}", f"{mean:.2f}"])
