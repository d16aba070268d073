# SPDX-License-Identifier: LGPL-2.1-or-later
"""tierfs from Python: a Dask worker store on a tierfs mount, and xattr helpers.

``tierfs.dask`` (needs distributed) has TierfsStore and TierfsWorker;
``tierfs.store`` has the store alone (no Dask needed); ``tierfs.xattr`` reads
a file's tier and the mount's counters; ``tierfs.device`` maps a file's
buffer on the GPU (``__cuda_array_interface__``) and asks for GPU memory
back (an RMM failure callback).
"""

from .store import TierfsStore, cleanup, cleanup_stale

__version__ = "0.1.0"
__all__ = ["TierfsStore", "cleanup", "cleanup_stale", "__version__"]
