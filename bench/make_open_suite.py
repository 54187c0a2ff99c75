"""Write bench/data/open.jsonl: open-ended chat requests of eleven kinds, written for edgespec.

Most of what an assistant writes is not copied from its prompt; this suite measures that
side. Every request and every passage below was written for edgespec's benchmark (the
organisations, people and figures in the passages are invented), so no model has seen them.
Ids are `<category>-<NN>`: `edgespec bench --by-category` groups by the part before the number.

Usage: python bench/make_open_suite.py   (rewrites bench/data/open.jsonl)
"""

from __future__ import annotations

import json
from pathlib import Path

MAX_TOKENS = 256

FACTUAL = [
    "Why do we have leap years, and how is it decided which years are leap years?",
    "What is the difference between an element and a compound? Give two examples of each.",
    "How does a rainbow form?",
    "What did the printing press change in fifteenth-century Europe?",
    "Why does ice float on water?",
    "What is the role of the mitochondria in a cell?",
]

REASONING = [
    "Anna is older than Ben. Ben is older than Carla. Dev is younger than Carla. Who is the "
    "second youngest? Explain your reasoning step by step.",
    "A shop sells pens in packs of 3 and packs of 5. Can you buy exactly 7 pens? Exactly 13? "
    "Explain how you decide.",
    "If all bloops are razzies and some razzies are lazzies, does it follow that some bloops "
    "are lazzies? Reason it through.",
    "A train leaves at 9:40 and the trip takes 2 hours 35 minutes, but it is delayed 18 "
    "minutes on the way. At what time does it arrive? Show each step.",
    "Three boxes are labelled apples, oranges and mixed, and every label is wrong. You may take "
    "one fruit from one box. How do you relabel all three boxes correctly?",
    "A farmer must cross a river with a wolf, a goat and a cabbage. The boat holds him and one "
    "item. The wolf eats the goat and the goat eats the cabbage if left alone. Plan the "
    "crossings.",
]

MATH = [
    "A recipe for 4 people uses 300 g of flour. How much flour is needed for 10 people?",
    "Maria earns 18 euros an hour and works 7.5 hours a day, 4 days a week. How much does she "
    "earn in a week, and in a 52-week year?",
    "A jacket costs 80 dollars. It is discounted by 25 percent, and then a 10 percent sales tax "
    "is added. What is the final price?",
    "A rectangular garden is 12 m long and 7 m wide. A path 1 m wide runs around the outside. "
    "What is the area of the path?",
    "Two cyclists start 90 km apart and ride towards each other at 20 km/h and 25 km/h. After "
    "how long do they meet, and how far has each ridden?",
    "A tank holds 1200 litres. One pipe fills it in 6 hours and another drains it in 10 hours. "
    "If both are open, how long does it take to fill the empty tank?",
]

TRANSLATE = [
    "Translate into French: 'The museum opens at ten, but the guided tours start at eleven.'",
    "Translate into Spanish: 'Could you tell me where the nearest pharmacy is? My daughter has "
    "a fever.'",
    "Translate into German: 'We postponed the meeting because half of the team was travelling.'",
    "Translate this German sentence into English: 'Der Zug hatte zwanzig Minuten Verspätung, "
    "deshalb haben wir den Anschluss verpasst.'",
    "Translate into Italian: 'I would like a table for two near the window, please.'",
    "Translate this French text into English: 'Il pleuvait depuis le matin, mais les enfants "
    "ont quand même voulu aller au parc.'",
]

PASSAGE_LIBRARY = (
    "The town library of Marrowdale reopened in March after an eighteen-month renovation. The "
    "old reading room, which had been closed since a roof leak in 2021, now has new skylights "
    "and a children's corner with low shelves. The council spent 2.4 million on the work, a "
    "third more than first planned, mostly because asbestos was found in the basement. Opening "
    "hours have been extended to 8 pm on weekdays. The head librarian, Ines Okafor, said visits "
    "in the first month were twice those of the same month before the closure, and that the "
    "most borrowed items were not books but the new loanable laptops."
)
PASSAGE_BATTERY = (
    "Researchers at the Halvorsen Institute tested a sodium-ion battery for home storage over "
    "two winters. The cells kept 91 percent of their capacity after 3000 charge cycles and "
    "worked down to minus 20 degrees, where lithium-ion packs in the same houses lost about a "
    "quarter of their usable energy. The sodium cells are heavier for the same energy, which "
    "matters little in a basement but rules them out for cars for now. Their materials are "
    "cheaper and easier to source. The team's main open question is cost at scale: the pilot "
    "line made only 400 cells a week."
)
PASSAGE_MEETING = (
    "Minutes, product meeting, 14 May. Present: Lena (chair), Tomas, Priya, Sam. The mobile "
    "release moves from 3 June to 17 June because the payment provider changes its API on 1 "
    "June. Priya will update the payment module by 28 May. Sam reported that crash reports "
    "fell 40 percent since the last release; the remaining top crash is in the photo upload "
    "screen on older Android phones, and Tomas will investigate it this week. The team agreed "
    "to drop the dark-mode redesign from this release. Next meeting: 21 May."
)
PASSAGE_COFFEE = (
    "The Quillon cooperative grows coffee on steep slopes at 1600 to 1900 metres. Its 212 "
    "member families pick cherries by hand between November and February. Since 2019 the "
    "cooperative has run its own washing station, which lets it sell directly to roasters "
    "instead of through middlemen; members now receive about 60 percent of the export price, "
    "up from roughly 35 percent. Drier years have pushed some farms to plant shade trees and "
    "to collect rainwater in ponds. The cooperative's manager, Rosa Imbert, wants to add a "
    "small roasting room so that part of the harvest can be sold in the region's cafes."
)
PASSAGE_BRIDGE = (
    "The Kestrel Street footbridge, built in 1968, was closed in January after inspectors "
    "found corrosion in two of its four steel supports. The city considered repairing it for "
    "an estimated 1.1 million or replacing it for 3.6 million. Repair would extend its life by "
    "about 15 years; a new bridge would last 80 and could be wide enough for bicycles. About "
    "2400 people crossed it each weekday before the closure, most of them pupils of the two "
    "schools on the east bank. The council voted 7 to 4 for replacement, with construction "
    "planned to start next spring and a temporary ferry until then."
)
PASSAGE_CLINIC = (
    "Northgate Family Clinic, patient information. Opening hours: Monday to Friday 7:30 to "
    "18:00, Saturday 9:00 to 12:00, closed Sunday. Appointments are booked by phone on 0312 "
    "448 900 or online; same-day slots are released at 7:30. Blood tests are taken from 7:30 "
    "to 10:00 without appointment; patients should not eat for 8 hours before a fasting test. "
    "Repeat prescriptions take two working days. For urgent problems outside opening hours call "
    "the regional line, 116 117. The clinic's doctors are Dr. Amal Haddad, Dr. Jonas Berg and "
    "Dr. Mei Lin; Dr. Berg does not work on Wednesdays."
)

SUMMARIZE = [
    f"Summarize this news item in two sentences.\n\n{PASSAGE_LIBRARY}",
    f"Summarize the following passage in three bullet points.\n\n{PASSAGE_BATTERY}",
    f"Write a one-paragraph summary of these minutes for someone who missed the meeting."
    f"\n\n{PASSAGE_MEETING}",
    f"Summarize this text in one sentence of at most 30 words.\n\n{PASSAGE_COFFEE}",
    f"Summarize the decision described here and the reasons for it.\n\n{PASSAGE_BRIDGE}",
    f"Summarize this clinic information for a new patient in a short paragraph."
    f"\n\n{PASSAGE_CLINIC}",
]

EXTRACT = [
    f"From the passage below, list every number it mentions and what each refers to."
    f"\n\n{PASSAGE_LIBRARY}",
    f"Extract the action items from these minutes as a list of 'person: task (deadline)'."
    f"\n\n{PASSAGE_MEETING}",
    f"Extract the advantages and the disadvantages of the sodium cells as two lists."
    f"\n\n{PASSAGE_BATTERY}",
    f"Extract the names of all people in this passage and their roles.\n\n{PASSAGE_COFFEE}",
    f"Extract the two options the city considered, with cost and expected life of each, as a "
    f"small table.\n\n{PASSAGE_BRIDGE}",
    f"Extract the phone numbers in this text and say what each is for.\n\n{PASSAGE_CLINIC}",
]

RAG = [
    f"Use only the context to answer. Context: {PASSAGE_CLINIC}\n\nQuestion: I need a fasting "
    f"blood test on Wednesday and I want to see Dr. Berg the same day. Is that possible?",
    f"Use only the context to answer. Context: {PASSAGE_BRIDGE}\n\nQuestion: Why was the more "
    f"expensive option chosen, and how will pupils cross in the meantime?",
    f"Use only the context to answer. Context: {PASSAGE_COFFEE}\n\nQuestion: How did the "
    f"washing station change what the farmers earn?",
    f"Use only the context to answer. Context: {PASSAGE_MEETING}\n\nQuestion: Why was the "
    f"release date moved, and who is responsible for what must happen first?",
    f"Use only the context to answer. Context: {PASSAGE_BATTERY}\n\nQuestion: Would these "
    f"batteries be a good choice for an electric car? Answer from the text.",
    f"Use only the context to answer; say so if the context does not contain the answer. "
    f"Context: {PASSAGE_LIBRARY}\n\nQuestion: How many books does the library hold?",
]

WRITING = [
    "Write a short poem about a lighthouse keeper's last night on duty.",
    "Write a polite email to a landlord asking for the heating to be repaired.",
    "Write the opening paragraph of a mystery story set in a mountain hotel.",
    "Write a product description for a reusable water bottle that keeps drinks cold for a day.",
    "Write a short speech thanking volunteers who cleaned up a river.",
    "Write a limerick about a cat who learned to use a keyboard.",
]

ROLEPLAY = [
    "You are a ship's captain in 1850 writing in your log after a storm. Write today's entry.",
    "Pretend you are a museum guide showing a group of ten-year-olds a dinosaur skeleton. "
    "Start the tour.",
    "You are a friendly librarian. A visitor says: 'I liked The Hobbit, what should I read "
    "next?' Reply in character.",
    "Act as a job interviewer for a junior web developer role and ask your first three "
    "questions, with a sentence of small talk first.",
    "You are a barista in a busy cafe. A customer cannot decide what to order. Help them, in "
    "character.",
    "Play a medieval town crier announcing that the market will move to the river square.",
]

CODE_SNIPPETS = [
    """def dedupe(items):
    seen = set()
    out = []
    for x in items:
        if x not in seen:
            seen.add(x)
            out.append(x)
    return out""",
    """function debounce(fn, ms) {
  let timer;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
}""",
    """SELECT c.name, COUNT(o.id) AS orders
FROM customers c
LEFT JOIN orders o ON o.customer_id = c.id
GROUP BY c.name
HAVING COUNT(o.id) > 3
ORDER BY orders DESC;""",
    """def fib(n, memo={}):
    if n < 2:
        return n
    if n not in memo:
        memo[n] = fib(n - 1) + fib(n - 2)
    return memo[n]""",
    """grep -rl "TODO" src | xargs sed -i 's/TODO/FIXME/g'""",
    """func worker(jobs <-chan int, results chan<- int) {
    for j := range jobs {
        results <- j * j
    }
}""",
]
CODE_EXPLAIN = [
    f"Explain what this code does, line by line, and mention one pitfall.\n\n```\n{code}\n```"
    for code in CODE_SNIPPETS
]

ADVICE = [
    "How should I prepare for my first half marathon in twelve weeks?",
    "What are good ways to learn vocabulary in a new language?",
    "How can a small team keep meetings short and useful?",
    "My tomato plants have yellow lower leaves. What could cause that and what can I do?",
    "How do I start saving money when my income varies from month to month?",
    "What should I check before buying a used bicycle?",
]

SUITE = {
    "factual": FACTUAL,
    "reasoning": REASONING,
    "math": MATH,
    "translate": TRANSLATE,
    "summarize": SUMMARIZE,
    "extract": EXTRACT,
    "rag": RAG,
    "writing": WRITING,
    "roleplay": ROLEPLAY,
    "code-explain": CODE_EXPLAIN,
    "advice": ADVICE,
}


def requests() -> list[dict]:
    out = []
    for category, contents in SUITE.items():
        for i, content in enumerate(contents, start=1):
            out.append(
                {
                    "id": f"{category}-{i:02d}",
                    "messages": [{"role": "user", "content": content}],
                    "max_tokens": MAX_TOKENS,
                }
            )
    return out


def main() -> None:
    path = Path(__file__).parent / "data" / "open.jsonl"
    lines = [json.dumps(r, ensure_ascii=False) for r in requests()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {len(lines)} requests to {path}")


if __name__ == "__main__":
    main()
