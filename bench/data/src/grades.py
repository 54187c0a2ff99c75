def letter_grade(score):
    if score >= 90:
        return "A"
    elif score >= 80:
        return "B"
    elif score >= 70:
        return "C"
    elif score >= 60:
        return "D"
    else:
        return "F"


def class_report(students):
    report = []
    for name, scores in students.items():
        avg = sum(scores) / len(scores)
        report.append((name, round(avg, 1), letter_grade(avg)))
    report.sort(key=lambda row: row[1], reverse=True)
    return report


def passing(students, minimum=60):
    names = []
    for name, scores in students.items():
        if sum(scores) / len(scores) >= minimum:
            names.append(name)
    return names


def histogram(students):
    counts = {}
    for name, scores in students.items():
        grade = letter_grade(sum(scores) / len(scores))
        counts[grade] = counts.get(grade, 0) + 1
    return counts
