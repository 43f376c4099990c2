"""The data plane: an emulated backbone of a map in Linux network namespaces (the netlab),
and the steering of decisions' paths onto it with SRv6 (`docs/dataplane.md`).

`plan` and `encaps` are pure (names, addresses, bytes); `bpf`, `manifest` and `linux` do the
I/O; `steering` is the adapter a brain installs and removes its segments through.
"""
