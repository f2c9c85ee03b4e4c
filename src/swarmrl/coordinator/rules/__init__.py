"""The protocol's rules over the stored state: leases, credit, penalties, liveness and unsubmitted uploads."""
