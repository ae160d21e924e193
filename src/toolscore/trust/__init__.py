"""Trust in what servers send: the poisoning scan of their definitions (poison.py) and its verdicts (verdict.py)."""
