"""The sentinel values the cell state's per-leaf arrays hold (what `topology.state` re-exports)."""

NO_GANG = -1  # a leaf no gang uses
NO_OWNER = -1  # a leaf or cell bound to no VC (the free pool)
FREE_PRIORITY = -2  # the priority of a free leaf
