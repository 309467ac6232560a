"""Dynamic Resource Allocation: topogang's GPUs as ResourceClaim allocations (`topogang serve --dra`).

`devices` maps ResourceSlice devices onto the cell tree's GPUs and reads device taints; `claims`
reads a pod's ResourceClaims and writes their status. Both are pure; `extender.kube.dra` does the
I/O.
"""
