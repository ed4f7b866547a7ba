"""What a media workflow made, from its task rows (``es_sched.workers.media``'s outputs):
renditions (``media.transcode``), the thumbnail sprite or frames (``media.thumbnail``), the HLS
package (``media.package``) and the asset record (``media.write_asset``). Files are shown by
their URIs; the console serves no media. A value too large for the row is a reference to the
archived event (``projections.views``) and is shown as such.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from es_sched.projections.views import Row, is_ref

JSON = dict[str, Any]


@dataclass
class MediaView:
    renditions: list[JSON] = field(default_factory=list)
    thumbnails: list[JSON] = field(default_factory=list)
    package: JSON | None = None
    asset: JSON | None = None
    probe: JSON | None = None
    large: list[str] = field(default_factory=list)  # refs of outputs kept in the archive
    tasks: list[Row] = field(default_factory=list)

    @property
    def is_media(self) -> bool:
        return any(t["task_type"].startswith("media.") for t in self.tasks)


def media_view(tasks: list[Row]) -> MediaView:
    view = MediaView(tasks=tasks)
    for t in tasks:
        out = t.get("output")
        if t["status"] != "COMPLETED" or not out:
            continue
        if is_ref(out):
            view.large.append(t["ref"])
            continue
        match t["task_type"]:
            case "media.transcode":
                view.renditions.append({"ref": t["ref"], **out})
            case "media.thumbnail":
                for key in ("sprite", "frames"):
                    if key in out:
                        items = out[key] if isinstance(out[key], list) else [out[key]]
                        view.thumbnails += [
                            {"ref": t["ref"], "kind": key, **i}
                            for i in items
                            if isinstance(i, dict)
                        ]
            case "media.package":
                view.package = out
            case "media.write_asset":
                view.asset = out
            case "media.probe":
                view.probe = out
    return view
