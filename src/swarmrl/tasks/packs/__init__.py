"""Community task packs: tasks anyone can offer a swarm, admitted only once trusted checks pass (docs/task-packs.md).

A pack is a directory or .tar.gz of fixed files (`files`): a manifest (`manifest`), rows in the `prompts` dataset
layout and reference solutions (`rows`), a verifier with TRL's reward-function signature or code tests, and its
author's Ed25519 signature over all of it (`signing`); `pack.load_pack` reads and checks it statically.
`admission.check_pack` runs the checks cheapest first — loads, leaking (`leaks`, `near_duplicates`), then the
verifier in the code sandbox (`judging`) on the reference solutions and the generic cheats (`cheats`) for
loads, solvable and hackable, and useful from the run's policy (phase 2) — and returns the report (`report`),
each check's figures computed in `checks`. `cli` holds `swarmrl tasks check | sign | pack`.

Nothing here imports the package's heavier parts on import.
"""
