"""The six media task types, registered on a ``Worker``.

``register_media(worker, settings)`` finds ffmpeg and ffprobe (``ConfigError`` when absent),
checks that ``ES_SCHED_MEDIA_CALLBACK_SECRET`` is set (``ConfigError`` naming it otherwise:
a worker that cannot sign callbacks should not start), detects NVENC once and registers:

``media.probe``      {uri, checksum?} -> the source's reference and properties, and
                     ``estimates`` (resources per ``<codec>_<height>[_gpu]``) for transcodes
``media.transcode``  see ``transcode``;  ``media.thumbnail``  see ``thumbnail``
``media.package``    see ``package``;    ``media.write_asset`` see ``asset``
``media.callback``   see ``callback``

Handlers are synchronous (the SDK runs them in its thread pool) and raise ``TaskFailure`` with
``retryable`` set by whether another attempt could succeed.
"""

from __future__ import annotations

from collections.abc import Callable

from es_sched.errors import ConfigError
from es_sched.settings import MediaSettings, Settings
from es_sched.workers.media import cost, files, probe
from es_sched.workers.media.asset import write_asset
from es_sched.workers.media.callback import callback
from es_sched.workers.media.package import package
from es_sched.workers.media.thumbnail import thumbnail
from es_sched.workers.media.toolkit import JSON, Toolkit
from es_sched.workers.media.transcode import transcode
from es_sched.workers.sdk import TaskContext, TaskFailure, Worker

Handler = Callable[[TaskContext, JSON, Toolkit], JSON]
TYPES = (
    "media.probe",
    "media.transcode",
    "media.thumbnail",
    "media.package",
    "media.write_asset",
    "media.callback",
)


def probe_source(ctx: TaskContext, task: JSON, kit: Toolkit) -> JSON:
    ref = task.get("uri") or task.get("source")
    path = files.open_ref(ref, None, "uri")
    sha256 = files.sha256_of(path)
    expected = files.normalise_checksum(task.get("checksum") or task.get("source_checksum"))
    if expected is not None and expected != sha256:
        raise TaskFailure(f"{path} has sha256 {sha256}, not {expected}", retryable=False)
    props = probe.probe(path, kit.ffprobe)
    grid = cost.estimate_grid(
        props["duration"], props["width"], props["height"], props["fps"], kit.settings.max_cpu
    )
    return {
        "uri": files.uri_of(path),
        "path": str(path),
        "size": path.stat().st_size,
        "sha256": sha256,
        **props,
        **grid,
    }


HANDLERS: dict[str, Handler] = {
    "media.probe": probe_source,
    "media.transcode": transcode,
    "media.thumbnail": thumbnail,
    "media.package": package,
    "media.write_asset": write_asset,
    "media.callback": callback,
}


def _bind(fn: Handler, kit: Toolkit) -> Callable[[TaskContext, JSON], JSON]:
    def handle(ctx: TaskContext, task_input: JSON) -> JSON:
        return fn(ctx, task_input, kit)

    handle.__name__ = handle.__qualname__ = fn.__name__
    return handle


def check_settings(media: MediaSettings) -> None:
    if not media.callback_secret:
        raise ConfigError(
            "ES_SCHED_MEDIA_CALLBACK_SECRET is not set: media.callback signs every body with it"
        )


def register_media(worker: Worker, settings: Settings, kit: Toolkit | None = None) -> Worker:
    """Register every media handler on ``worker``; see the module docstring."""
    check_settings(settings.media)
    kit = kit or Toolkit.create(settings.media)
    for task_type in TYPES:
        worker.task(task_type)(_bind(HANDLERS[task_type], kit))
    return worker
