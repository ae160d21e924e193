"""ToolHub: capability tags, capability calls over redundant servers, and tool search.

capabilities.py  tags per tool (config, annotations, a small vocabulary) and near-duplicates
text.py          the words of names, descriptions and queries: split, stemmed (tagging and search share them)
synonyms.py      the words people use for the same tool action or object
search.py        the BM25F index behind `search_tools`
mapping.py       a capability call's arguments onto one candidate's schema
scoring.py       live scores from the audit stream, and the candidates' order
persist.py       those scores across restarts: a file in the state directory, or Redis
synthesis.py     the `all` strategy's merge: dedupe, keep sources, cut at sentences
catalog.py       what `tools/list` shows per catalog mode; the hub's tool definitions
hub.py           the ToolHub itself: strategies, and the front tools' answers
"""

from toolscore.toolhub.hub import Attempt, ToolHub
from toolscore.toolhub.scoring import ObservingSink, Scoreboard

__all__ = ["Attempt", "ObservingSink", "Scoreboard", "ToolHub"]
