"""Writes the JPEG fixtures of vla-server/tests/request_jpeg.rs with Pillow's decode of each
as the reference pixels. Rerun: pip install pillow numpy; python3 tools/golden/jpeg.py"""

import pathlib

import numpy as np
from PIL import Image

OUT = pathlib.Path(__file__).resolve().parents[2] / "vla-server" / "tests" / "data"


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    y, x = np.mgrid[0:20, 0:28]
    rgb = np.stack([x * 9, y * 12, (x + y) * 5], axis=-1).clip(0, 255).astype(np.uint8)
    for name, img in [("rgb", Image.fromarray(rgb, "RGB")), ("gray", Image.fromarray(rgb[..., 0], "L"))]:
        path = OUT / f"{name}-28x20.jpg"
        img.save(path, quality=95)
        decoded = np.asarray(Image.open(path).convert("RGB"))
        (OUT / f"{name}-28x20.rgb").write_bytes(decoded.tobytes())
        print(path, decoded.shape)


if __name__ == "__main__":
    main()
