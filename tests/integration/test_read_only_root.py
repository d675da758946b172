"""``kstage run`` on a read-only root filesystem, as the Helm chart runs it
(``readOnlyRootFilesystem: true``, emptyDirs on ``/data`` and ``/tmp``): on the real
broker it consumes, writes and commits with nothing writable but its working directory
(also its home, as in the image) and ``/tmp``.

The root is made read-only in a mount namespace of the child only (``unshare -m``, root
needed): the host's filesystem is untouched. The child first checks that it cannot write
to the root, so the test cannot pass on a writable one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.kafkautil import CHILD_PATH, create_topic, produce, read_jsonl, unique, write_config

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

# In the child's own mount namespace: /tmp stays writable (a bind of itself, which also
# holds the test's working directory), everything else of / becomes read-only.
READ_ONLY_ROOT = """
set -e
mount --make-rprivate /
mount --bind /tmp /tmp
mount -o remount,bind,ro /
if touch /kstage-read-only-probe 2>/dev/null; then
    echo "the root filesystem is writable" >&2; exit 97
fi
cd "$PWD"  # the working directory again, through the writable mount
exec "$@"
"""


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="a mount namespace needs root and unshare")
async def test_kstage_runs_on_a_read_only_root_filesystem(broker: str, tmp_path: Path) -> None:
    topic, group = unique("read-only-root"), unique("g-read-only-root")
    data = tmp_path / "data"
    data.mkdir()
    out = data / "out.jsonl"
    cfg = write_config(data / "kstage.yml", broker, group,
                       [{"topic": topic, "processor": "json_rows",
                         "sink": {"type": "jsonl", "path": "out.jsonl"}}],
                       auto_offset_reset="earliest")
    await create_topic(broker, topic)
    await produce(broker, topic, ({"i": i} for i in range(20)))
    env = {**os.environ, "PYTHONPATH": CHILD_PATH, "HOME": str(data),
           "PYTHONDONTWRITEBYTECODE": "1"}  # as the image: home = working directory
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", READ_ONLY_ROOT, "sh",
         sys.executable, "-m", "service", "run", "-c", str(cfg), "--drain"],
        cwd=data, env=env, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(row["i"] for row in read_jsonl(out)) == list(range(20))
