"""Trainer islands: several async-GRPO trainers, each with its own workers, merged every H policy steps by DiLoCo.

An island is an ordinary local run (trainer + workers sharing a run directory). Every `merge_every` policy
steps its trainer exchanges a pseudo-gradient with the other islands through a torchft quorum (elastic
membership, gloo transport, the DiLoCo codecs), applies the outer Nesterov step and publishes the merged
policy as that step's checkpoint, so workers and validators see ordinary, monotone policy versions.
"""
