def zeros(rows, cols):
    result = []
    for i in range(rows):
        row = []
        for j in range(cols):
            row.append(0)
        result.append(row)
    return result


def transpose(m):
    rows, cols = len(m), len(m[0])
    result = zeros(cols, rows)
    for i in range(rows):
        for j in range(cols):
            result[j][i] = m[i][j]
    return result


def multiply(a, b):
    if len(a[0]) != len(b):
        raise ValueError("shapes do not match")
    result = zeros(len(a), len(b[0]))
    for i in range(len(a)):
        for j in range(len(b[0])):
            for k in range(len(b)):
                result[i][j] += a[i][k] * b[k][j]
    return result


def identity(n):
    result = zeros(n, n)
    for i in range(n):
        result[i][i] = 1
    return result
