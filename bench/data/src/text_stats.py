import re
from collections import Counter


def tokenize(text):
    return re.findall(r"[a-z']+", text.lower())


def word_frequencies(text, stopwords):
    counts = Counter()
    for word in tokenize(text):
        if word not in stopwords:
            counts[word] += 1
    return counts


def top_words(text, n, stopwords=()):
    freqs = word_frequencies(text, set(stopwords))
    return freqs.most_common(n)


def average_word_length(text):
    words = tokenize(text)
    if not words:
        return 0.0
    return sum(len(w) for w in words) / len(words)


def sentence_count(text):
    parts = re.split(r"[.!?]+", text)
    return len([p for p in parts if p.strip()])
