"""Dynamic Resource Allocation: topogang's GPUs as ResourceClaim allocations (`topogang serve --dra`).

`devices` maps ResourceSlice devices onto the cell tree's GPUs and reads device taints; `claims`
reads a pod's ResourceClaims and writes their status; `extended` shapes KEP-5004's claim for a pod
asking `nvidia.com/gpu`. All are pure; `extender.kube.dra` does the I/O.
"""
