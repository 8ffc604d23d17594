"""The self-test, `python -m audit.selftest` (`__main__`): the suite's plan and one-run ε bounds on simulated mechanisms
whose true ε is known, where a bound above the truth is a false alarm. `mechanisms` holds the mechanisms, each with its
proof; `designs` the rows audited (the plan, the rules and analyses, the verdict); `sequential` the rows with a look
after each target run; and `command` the command line that prints them. It reads numbers only (the statistics of
`audit.stats`), except that `mechanisms` calibrates its white-box rows with the victims' accountant
(`victims.dp.privacy`). Nothing is imported here."""
