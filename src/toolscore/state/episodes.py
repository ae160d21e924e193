"""`orchestrate` episodes shared by replicas: each plan reads its episode's latest state from the shared records."""

from __future__ import annotations

from typing import Any

from toolscore.loop.store import DurableEpisodes, episode_from_dict, owner_of
from toolscore.plan.tool import EpisodeStore
from toolscore.state import EpisodeRecords

__all__ = ["SharedEpisodes"]


class SharedEpisodes(DurableEpisodes):
    """`DurableEpisodes` over shared records.

    The durable store restores an episode only when this process has lost it (a restart). With
    replicas, the copy in memory may be stale (the episode went on elsewhere), so every plan that
    names an episode reads it again. Two plans continuing one episode at once on two replicas:
    the later save wins.
    """

    def __init__(self, records: EpisodeRecords, episodes: EpisodeStore) -> None:
        super().__init__(records, episodes)
        self._records = records
        self._store = episodes

    async def restore(self, caller: str, arguments: dict[str, Any] | None) -> None:
        """Before a plan: load the episode it continues as the shared records have it now."""
        ident = (arguments or {}).get("episode")
        if not isinstance(ident, str) or self._store.held_by_another(caller, ident):
            return  # as in DurableEpisodes: a live episode never moves to another client
        data = await self._records.get("plan", ident, owner_of(caller))
        if data is not None:
            self._store.new(caller, episode_from_dict(data))
