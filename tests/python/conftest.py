"""Shared fixtures: the built binaries (from CTest's environment, else build/) and one small JPEG
dataset converted to shards, made once per session."""
import os
import re
import shutil
import subprocess

import pytest

SOURCE_DIR = os.environ.get("STOKER_SOURCE_DIR",
                            os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
BUILD_DIR = os.path.join(SOURCE_DIR, "build")


@pytest.fixture(scope="session")
def stoker_bin():
    return os.environ.get("STOKER_BIN", os.path.join(BUILD_DIR, "stoker"))


@pytest.fixture(scope="session")
def make_images_bin():
    return os.environ.get("STOKER_MAKE_TEST_IMAGES", os.path.join(BUILD_DIR, "make_test_images"))


def converted_images(work, stoker_bin, make_images_bin, per_class):
    """3 classes x per_class JPEGs of 96x72 in work/images, converted to shards in work/shards;
    returns the dataset URL (a folder)."""
    subprocess.run([make_images_bin, str(work / "images"), "--classes", "3", "--per-class",
                    str(per_class), "--width", "96", "--height", "72"], check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run([stoker_bin, "convert", str(work / "images"), str(work / "shards")], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return str(work / "shards") + "/"


@pytest.fixture(scope="session")
def shards(tmp_path_factory, stoker_bin, make_images_bin):
    """3 classes x 20 JPEGs of 96x72, converted to shards; returns the dataset URL (a folder)."""
    return converted_images(tmp_path_factory.mktemp("data"), stoker_bin, make_images_bin, 20)


def image_spec(url):
    """The pipeline of tests/cli/run_cli_test.sh."""
    return {
        "source": {"dataset": url},
        "ops": [
            {"op": "shuffle", "seed": 7},
            {"op": "decode_image", "field": "jpg"},
            {"op": "random_resized_crop", "field": "jpg", "size": [32, 32]},
            {"op": "flip", "field": "jpg", "p": 0.5},
            {"op": "normalize", "field": "jpg", "mean": [0.485, 0.456, 0.406],
             "std": [0.229, 0.224, 0.225]},
            {"op": "batch", "size": 8},
            {"op": "prefetch", "buffer": 4},
        ],
    }


@pytest.fixture
def s3_server(tmp_path):
    """The Swift S3 test server (scripts/s3-test-server) for one test: its AWS_* environment."""
    script = os.path.join(SOURCE_DIR, "scripts", "s3-test-server")
    if shutil.which("swift-proxy-server") is None:
        pytest.skip("OpenStack Swift is not installed (scripts/install-deps.sh)")
    d = str(tmp_path / "s3")
    subprocess.run([script, "start", d], check=True, stdout=subprocess.DEVNULL, timeout=120)
    try:
        env_lines = subprocess.run([script, "env", d], check=True, capture_output=True,
                                   text=True).stdout
        env = {}
        for m in re.finditer(r"export (\w+)=(\S+)", env_lines):
            env[m.group(1)] = m.group(2).strip("'\"")
        yield env
    finally:
        subprocess.run([script, "stop", d], timeout=60)
