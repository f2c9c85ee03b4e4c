"""`type = "ordered"`: ask the sources in the order they were given, the nearest first.

For a node that lists the relay of its own region or rack before the distant ones: the next source gets a
request only while the ones before it back off after a failure (hedged requests still go to it). A source that
sent corrupt data goes behind every clean one, for good.
"""

from __future__ import annotations

from swarmrl.shardcast.selection.base import SourcePolicy


class OrderedPolicy(SourcePolicy):
    def ranked(self, candidates: list[str]) -> list[str]:
        position = {url: index for index, url in enumerate(self.stats)}  # sources added later come last
        return sorted(candidates, key=lambda url: (self.stats[url].corrupt, position[url]))

    def pick(self, ready: list[str]) -> str:
        return self.ranked(ready)[0]
