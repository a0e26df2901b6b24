"""decode_image on images made by third-party tools (Pillow, ImageMagick), checked against Pillow:
truncated and corrupt JPEGs are errors (or skipped and counted with on_error: skip), 16-bit PNGs
scale as round(v / 257), CMYK JPEGs decode to RGB, and grey from colour is Rec. 601 luma for PNG
and JPEG alike (docs/pipeline.md, "Image decoding")."""
import io
import json
import os
import shutil
import subprocess
import tarfile

import numpy as np
import pytest
from PIL import Image

import stoker

IMAGEMAGICK = "/usr/bin/convert"  # Debian's imagemagick (scripts/install-deps.sh)


def write_tar(path, members):
    """A WebDataset tar of {key: (field, bytes)} written by GNU tar from a folder."""
    folder = str(path) + ".d"
    os.makedirs(folder)
    names = []
    for key, (field, data) in members.items():
        name = f"{key}.{field}"
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)
        names.append(name)
    subprocess.run(["tar", "cf", str(path), "-C", folder] + names, check=True)
    shutil.rmtree(folder)
    return str(path)


def decode(tar, field, channels=3, on_error=None):
    params = {"op": "decode_image", "field": field, "channels": channels}
    if on_error:
        params["on_error"] = on_error
    pipe = stoker.Pipeline.from_spec({"source": {"tar": [tar]}, "ops": [params]})
    return {e["__keys__"][0]: np.array(e[field]) for e in pipe.iterator(threads=1)}


def noise_rgb(w=64, h=48, seed=1):
    rng = np.random.default_rng(seed)
    # Smooth content so that JPEG round trips are close to the source.
    base = rng.integers(0, 256, size=(h // 8 + 1, w // 8 + 1, 3), dtype=np.uint8)
    return np.array(Image.fromarray(base).resize((w, h), Image.BILINEAR))


def jpeg_bytes(array, mode="RGB", **kw):
    out = io.BytesIO()
    Image.fromarray(array, mode).save(out, "JPEG", quality=90, **kw)
    return out.getvalue()


def png_bytes(image):
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def test_jpeg_equals_pillow_and_truncated_jpeg_is_an_error(tmp_path, stoker_bin):
    good = jpeg_bytes(noise_rgb())
    tar = write_tar(tmp_path / "ok.tar", {"a": ("jpg", good)})
    got = decode(tar, "jpg")["a"]
    np.testing.assert_array_equal(got, np.array(Image.open(io.BytesIO(good)).convert("RGB")))

    # An interrupted download: Pillow refuses it; so must stoker (not grey rows and rc 0).
    truncated = good[: len(good) * 2 // 3]
    with pytest.raises(OSError):
        Image.open(io.BytesIO(truncated)).load()
    for progressive in (False, True):
        data = jpeg_bytes(noise_rgb(seed=2), progressive=progressive)
        cut = data[: len(data) * 2 // 3]
        tar = write_tar(tmp_path / f"cut{progressive}.tar", {"a": ("jpg", good), "b": ("jpg", cut)})
        with pytest.raises(Exception, match="corrupt JPEG"):
            decode(tar, "jpg")
        # on_error: skip drops it, and `stoker run` counts it in the skipped column.
        assert sorted(decode(tar, "jpg", on_error="skip")) == ["a"]
        spec = tmp_path / "spec.json"
        spec.write_text(json.dumps({"source": {"tar": [tar]}, "ops": [
            {"op": "decode_image", "field": "jpg", "on_error": "skip"}]}))
        run = subprocess.run([stoker_bin, "run", str(spec), "--print-keys"], capture_output=True,
                             text=True)
        assert run.returncode == 0, run.stderr
        assert run.stdout.split() == ["a"]
        row = [line for line in run.stderr.splitlines() if "decode_image" in line]
        assert row and row[0].split()[-1] == "1", run.stderr

    # Without on_error, `stoker run` fails naming the damage.
    spec.write_text(json.dumps({"source": {"tar": [tar]}, "ops": [
        {"op": "decode_image", "field": "jpg"}]}))
    run = subprocess.run([stoker_bin, "run", str(spec)], capture_output=True, text=True)
    assert run.returncode != 0 and "corrupt JPEG" in run.stderr, run.stderr

    # Damage in the middle (bytes of the entropy-coded data overwritten) is not silent either.
    data = bytearray(jpeg_bytes(noise_rgb(seed=3)))
    sos = data.index(b"\xff\xda")
    for i in range(sos + 40, len(data) - 40, 7):
        data[i] = 0xFF if i % 2 else 0x00
    tar = write_tar(tmp_path / "garbled.tar", {"g": ("jpg", bytes(data))})
    with pytest.raises(Exception, match="JPEG"):
        decode(tar, "jpg")


def test_sixteen_bit_png_is_v_over_257_without_gamma(tmp_path):
    values = np.array([[0, 2 * 257, 10 * 257, 400], [128 * 257, 65535, 383, 32767]], np.uint16)
    expected = np.floor(values.astype(np.float64) / 257 + 0.5).astype(np.uint8)
    grey = Image.frombytes("I;16", (4, 2), values.astype("<u2").tobytes())
    rgb16 = np.stack([values, values[::-1], values[:, ::-1]], axis=-1)
    # Pillow cannot write 48-bit RGB PNGs; ImageMagick can (from a 16-bit PPM).
    ppm = tmp_path / "rgb16.ppm"
    ppm.write_bytes(b"P6 4 2 65535\n" + rgb16.astype(">u2").tobytes())
    rgb_png = tmp_path / "rgb16.png"
    subprocess.run([IMAGEMAGICK, str(ppm), "-depth", "16", f"PNG48:{rgb_png}"], check=True)
    assert rgb_png.read_bytes()[24:26] == b"\x10\x02"  # bit depth 16, colour type RGB
    tar = write_tar(tmp_path / "png16.tar", {"g": ("png", png_bytes(grey)),
                                             "c": ("png", rgb_png.read_bytes())})
    got = decode(tar, "png", channels=1)
    np.testing.assert_array_equal(got["g"][:, :, 0], expected)
    got = decode(tar, "png", channels=3)
    np.testing.assert_array_equal(got["g"], np.repeat(expected[:, :, None], 3, axis=2))
    np.testing.assert_array_equal(got["c"], np.floor(rgb16 / 257 + 0.5).astype(np.uint8))
    # Pillow reads 48-bit RGB by the high byte (v >> 8): the same for the exact 8-bit expansions
    # v = 257 n, at most 1 less elsewhere (docs/pipeline.md).
    pillow = np.array(Image.open(rgb_png).convert("RGB")).astype(int)
    exact = rgb16 % 257 == 0
    np.testing.assert_array_equal(got["c"][exact], pillow[exact])
    np.testing.assert_array_equal(pillow, rgb16 >> 8)
    assert (got["c"].astype(int) - pillow).max() <= 1


def test_grey_from_colour_is_rec601_for_png_and_jpeg(tmp_path):
    rgb = noise_rgb(seed=4)
    tar = write_tar(tmp_path / "grey.tar", {"p": ("png", png_bytes(Image.fromarray(rgb)))})
    got = decode(tar, "png", channels=1)
    np.testing.assert_array_equal(got["p"][:, :, 0], np.array(Image.fromarray(rgb).convert("L")))
    # A JPEG's grey is its luma channel, computed by the encoder with the same weights: close to
    # Pillow's convert("L") of the decoded RGB (JPEG loss aside).
    tar = write_tar(tmp_path / "grey-jpg.tar", {"j": ("jpg", jpeg_bytes(rgb))})
    got = decode(tar, "jpg", channels=1)
    pillow = np.array(Image.open(io.BytesIO(jpeg_bytes(rgb))).convert("L")).astype(int)
    assert np.abs(got["j"][:, :, 0].astype(int) - pillow).max() <= 3


def test_cmyk_jpegs_decode_to_rgb_as_pillow(tmp_path):
    rgb = noise_rgb(seed=5)
    src = tmp_path / "src.png"
    Image.fromarray(rgb).save(src)
    im_cmyk = tmp_path / "im.jpg"
    subprocess.run([IMAGEMAGICK, str(src), "-colorspace", "CMYK", "-quality", "92", str(im_cmyk)],
                   check=True)
    assert Image.open(im_cmyk).mode == "CMYK"
    pil_cmyk = jpeg_bytes(np.array(Image.fromarray(rgb).convert("CMYK")), mode="CMYK")
    tar = write_tar(tmp_path / "cmyk.tar", {"m": ("jpg", im_cmyk.read_bytes()),
                                            "p": ("jpg", pil_cmyk)})
    got = decode(tar, "jpg")
    for key, data in (("m", im_cmyk.read_bytes()), ("p", pil_cmyk)):
        expected = np.array(Image.open(io.BytesIO(data)).convert("RGB"))
        assert got[key].shape == expected.shape
        np.testing.assert_array_equal(got[key], expected)
    grey = decode(tar, "jpg", channels=1)
    expected = np.array(Image.open(io.BytesIO(pil_cmyk)).convert("RGB").convert("L"))
    np.testing.assert_array_equal(grey["p"][:, :, 0], expected)
