"""Translating one model's KV cache into another model's cache space.

``features`` turns caches into per-token, per-layer feature rows (keys un-rotated), ``assemble``
turns predicted target rows back into a loadable target ``KVCache`` (re-rotated with the
target's own per-layer RoPE, sliding layers cut to their window), and each translator (the
closed-form ``ridge`` baseline, the learned mixture) maps aligned source rows to target rows.
"""
