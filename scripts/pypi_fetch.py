"""Downloads one named file of a PyPI release (e.g. an sdist) through pip's own index address.

  python scripts/pypi_fetch.py NAME FILENAME OUT

Used by scripts/setup.sh for C++ sources that a pinned PyPI distribution ships; the caller checks
the sha256. pip download cannot fetch such an sdist without building its metadata.
"""
import json
import sys
import urllib.request

from pip._internal.models.index import PyPI

name, filename, out = sys.argv[1:4]
req = urllib.request.Request(PyPI.simple_url + "/" + name + "/",
                             headers={"Accept": "application/vnd.pypi.simple.v1+json"})
files = json.load(urllib.request.urlopen(req, timeout=60))["files"]
urls = [f["url"] for f in files if f["filename"] == filename]
if not urls:
    sys.exit(f"pypi_fetch: {name} has no file {filename}")
with urllib.request.urlopen(urls[0], timeout=300) as r, open(out, "wb") as f:
    f.write(r.read())
