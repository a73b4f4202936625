"""The KV cache for decoding (SPEC.md section 6): its Python class goes here.

Not yet: the C API for the cache (appending K/V rows at cache_len[b], paged storage through a
block table, attention over the first L_b rows of each sequence) is being written on main. Once
it lands, this module wraps it as `clattn.KVCache`, in the style of clattn.Context: a class that
owns the cache's host or device storage and its lengths, with append() and attention() methods
whose docstrings give the shapes ([B, capacity, Hkv, D] caches, int32 [B] lengths,
[B, max_pages] block tables), and __init__.py exports it.
"""
