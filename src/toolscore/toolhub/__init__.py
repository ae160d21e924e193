"""ToolHub: capability tags, capability calls over redundant servers, and tool search.

capabilities.py  tags per tool (config, annotations, a small vocabulary) and near-duplicates
text.py          the words of names and descriptions (tagging and search share them)
search.py        the BM25 index behind `search_tools`
mapping.py       a capability call's arguments onto one candidate's schema
scoring.py       live scores from the audit stream, and the candidates' order
synthesis.py     the `all` strategy's merge: dedupe, keep sources, cut at sentences
catalog.py       what `tools/list` shows per catalog mode; the hub's tool definitions
hub.py           the ToolHub itself: strategies, and the front tools' answers
"""

from toolscore.toolhub.hub import Attempt, ToolHub
from toolscore.toolhub.scoring import ObservingSink, Scoreboard

__all__ = ["Attempt", "ObservingSink", "Scoreboard", "ToolHub"]
