"""Make the class-data archives of the suite's JVMs before pytest starts
(tests/jvm_archive.py): ``python -m tests.make_jvm_archives``.

``make test`` runs this beside ruff, mypy and the Maven fetches, once the jars it needs
are there, so the first xdist workers find the archives made instead of waiting for them
(about a minute on the 2-core machine). The two archives are made side by side; each
under its own lock, so a pytest process that needs one at the same time waits for it
instead of making it again. One that cannot be made is said on stderr: the suite makes
it later or runs slower, never fails for it. Quick when both exist.
"""

from __future__ import annotations

import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests import kafka_jvm, spark_jvm


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="kstage-cds-") as shared, \
            ThreadPoolExecutor(2) as pool:
        made = [pool.submit(ensure, Path(shared))
                for ensure in (spark_jvm.ensure_archive, kafka_jvm.ensure_archive)]
        for future in made:
            archive = future.result()
            sys.stdout.write(f"class-data archive: {archive or 'none (see above)'}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
