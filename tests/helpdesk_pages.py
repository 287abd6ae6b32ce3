"""A second help-desk domain for the tests of the embedded judge taught by a user's labels (issue 47), written for
them (not from ../shared data): the help centre of a made-up invoicing app. Each page has three sections of two or
three sentences; a customer's question is retrieved with its page's three sections, of which one answers it (in other
words than the question's, the answer one sentence among others) and two are the same page's sections on other
questions (same words, no answer). Customers ask the same things in different words, so each question comes in two
or three phrasings, as a help desk's traffic does. The node labels are relevance labels: only the answering section
is relevant."""

from __future__ import annotations

import random
from typing import Any

# page -> its three sections
PAGES: list[list[str]] = [
    [  # 0 account and sign-in
        "Forgot the password for your Tally account? On the sign-in screen pick 'Trouble signing in' and we email a "
        "link that is valid for one hour. Your invoices and clients are not touched when the password changes.",
        "Two-step sign-in adds a six-digit code from an authenticator app to your password. Turn it on under "
        "Profile, Security; each account owner can also require it for the whole team.",
        "The email address of your Tally account is changed under Profile, Contact. We send a confirmation to the "
        "new address, and the old one keeps working until you click it.",
    ],
    [  # 1 plans and billing
        "Tally Solo costs 9 euros a month and Tally Team 24 euros a month for up to five people. Moving to a bigger "
        "plan takes effect at once and the difference is charged for the days left in the month.",
        "If you cancel within 14 days of your first payment, the whole amount comes back to your card. After that "
        "the plan runs to the end of the period you paid for and nothing further is charged.",
        "Receipts for your own Tally subscription are under Settings, Billing history. Each one can be downloaded "
        "as a PDF with your company details for your bookkeeping.",
    ],
    [  # 2 creating invoices
        "Upload your company logo under Settings, Branding as a PNG or SVG file. It then appears at the top left of "
        "every invoice and quote you send, including the ones already drafted.",
        "Each client can be billed in their own currency: set it on the client's card and new invoices to them use "
        "it. Amounts are never converted; your reports show each currency separately.",
        "A repeating invoice is sent for you on a schedule, weekly, monthly or yearly. Create it from any invoice "
        "with 'Repeat this', choose the day, and Tally issues a fresh copy with a new number each time.",
    ],
    [  # 3 getting paid
        "To let clients pay an invoice by card, connect a PayLink account under Settings, Payments. A 'Pay now' "
        "button then appears on every invoice email and on the online copy.",
        "Money paid through PayLink reaches your bank account two working days after the client pays. Weekends and "
        "bank holidays add to that, and the first payout of a new account can take a week.",
        "When a client pays in cash or by bank transfer, open the invoice and choose 'Record payment' with the date "
        "and amount. A partly paid invoice stays open for the rest.",
    ],
    [  # 4 reminders and late invoices
        "Tally can nudge clients who have not paid by the due date. Switch on Reminders under Settings, Reminders and "
        "choose to send them 3, 7 or 14 days after the due date; the wording can be edited.",
        "A late fee can be added to overdue invoices as a fixed amount or a percentage per month. It is shown as its "
        "own line, and it is never added unless you switch it on for that invoice.",
        "Some clients should never get reminders. Open the client's card and untick 'Send reminders'; their "
        "invoices still show as overdue in your list.",
    ],
    [  # 5 clients
        "A spreadsheet of clients comes in through Clients, Import: save it as CSV with a header row and match the "
        "columns to name, email and address. Up to 5,000 rows are read at a time.",
        "Two cards for the same client can be combined with 'Merge' on either card. The invoices, notes and payments "
        "of both end up on one card and nothing is lost.",
        "Removing a client erases their card and contact details for good. Invoices already sent to them are kept for "
        "ten years, as tax law asks, but show the name only.",
    ],
    [  # 6 taxes
        "Tax rates are set under Settings, Taxes: add a name such as VAT and a percentage. Each invoice line can then "
        "carry one or two of your rates, and the totals show the tax apart.",
        "Prices can be typed with tax already included. Tick 'Prices include tax' on the invoice and Tally works out "
        "the net amount and the tax share of each line for you.",
        "For a business customer in another EU country, tick 'Reverse charge' on the client's card and enter their "
        "VAT number. Invoices to them then carry no VAT and the note the law asks for.",
    ],
    [  # 7 team
        "Your accountant can see your books without paying for a seat. Invite them from Team, Add person with the "
        "role Accountant: they read everything and can export, but cannot send invoices.",
        "Every person on a team has a role. Owners change billing and people, Members create and send invoices, and "
        "Viewers only read; roles are changed from the person's row in Team.",
        "Someone who leaves the company is taken off under Team: choose 'Remove' on their row. Their invoices stay, "
        "and the seat is free at once for the next person you invite.",
    ],
]

# (page, answering section, the question in the words of two or three customers)
QUESTIONS: list[tuple[int, int, list[str]]] = [
    (0, 0, ["How do I reset my password?", "I can't remember my login password, what now?",
            "Locked out because I lost my password"]),
    (0, 1, ["How can I turn on two-factor authentication?", "Is there 2FA for logging in?"]),
    (0, 2, ["How do I update the email on my account?", "I want to use a different email address to log in"]),
    (1, 0, ["How much is the team plan?", "What does Tally cost per month?", "Price of upgrading to Team?"]),
    (1, 1, ["Can I get my money back if I cancel?", "Do you refund the subscription?"]),
    (1, 2, ["Where can I download receipts for what I pay Tally?", "I need an invoice for my Tally subscription"]),
    (2, 0, ["How do I put my logo on invoices?", "Can I add my company logo to the invoice?"]),
    (2, 1, ["Can I invoice in dollars instead of euros?", "How do I bill a client in another currency?",
            "Change the currency on an invoice"]),
    (2, 2, ["How do I set up a recurring invoice?", "Can Tally send the same invoice every month automatically?"]),
    (3, 0, ["Can my clients pay by credit card?", "How do I accept card payments on invoices?"]),
    (3, 1, ["When do I receive the money from card payments?", "How long do payouts take?",
            "Client paid by card but I don't have the money yet"]),
    (3, 2, ["How do I mark an invoice as paid?", "Client paid cash, how do I record that?"]),
    (4, 0, ["Can Tally send payment reminders automatically?", "How do I remind clients about unpaid invoices?"]),
    (4, 1, ["Can I charge interest on late invoices?", "How do I add a late payment fee?"]),
    (4, 2, ["How do I stop reminders going to one customer?", "Don't send reminder emails to a specific client"]),
    (5, 0, ["How do I import my client list from Excel?", "Can I upload contacts from a CSV file?"]),
    (5, 1, ["I have the same client twice, how do I combine them?", "How to merge duplicate clients?"]),
    (5, 2, ["How do I delete a client?", "Remove a customer and their data"]),
    (6, 0, ["How do I add VAT to my invoices?", "Where do I set the sales tax rate?"]),
    (6, 1, ["My prices already include VAT, how do I enter them?", "Can I enter gross prices with tax included?"]),
    (6, 2, ["How do I invoice an EU company without VAT?", "Reverse charge for a business client in Germany?"]),
    (7, 0, ["Can my accountant get access?", "How do I give my bookkeeper a login?"]),
    (7, 1, ["What can a Viewer do compared to a Member?", "How do I change what a team member is allowed to do?"]),
    (7, 2, ["How do I remove an employee from my account?", "Someone left the company, how do I take them off?"]),
]


def helpdesk_page_rows(seed: int = 7) -> list[dict[str, Any]]:
    """One labelled case a question phrasing (``input``, ``retrieval_context``: the page's three sections in a seeded
    order, ``relevance_labels``), the cases in a seeded order (so a slice is a sample of the traffic)."""
    rng = random.Random(seed)
    rows = []
    for page, answer, phrasings in QUESTIONS:
        for q in phrasings:
            order = [0, 1, 2]
            rng.shuffle(order)
            rows.append({"input": q, "retrieval_context": [PAGES[page][k] for k in order],
                         "relevance_labels": [1 if k == answer else 0 for k in order]})
    rng.shuffle(rows)
    return rows
