"""One router per kind of caller: nodes, work, leases, the trainer, operators, reports and public reads."""
