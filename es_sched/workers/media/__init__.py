"""Built-in media task handlers on the worker SDK, using ffmpeg and ffprobe.

``register_media(worker, settings)`` serves ``media.probe``, ``media.transcode``,
``media.thumbnail``, ``media.package``, ``media.write_asset`` and ``media.callback``
(``es-sched worker --media`` does it from the command line). Inputs and outputs are file
references (``file://`` URI or path, sha256, size), never bytes; outputs go to the task's
``output_dir`` or ``ES_SCHED_MEDIA_OUTPUT_DIR/<workflow id>``, each written under a temporary
name and renamed into place when complete. Modules: ``probe`` (ffprobe), ``command`` (the
transcode command and progress parser, pure), ``cost`` (resource estimates, pure), ``proc``
(running ffmpeg in its own process group, ended as a group on cancellation), ``gpu``
(NVENC detection), one module per remaining task type, and ``handlers`` (registration).
"""

from es_sched.workers.media.handlers import TYPES, register_media
from es_sched.workers.media.toolkit import Toolkit

__all__ = ["TYPES", "Toolkit", "register_media"]
