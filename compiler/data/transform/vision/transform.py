"""Vision transforms on samples whose fields are named by ``order``.

A sample is a tuple (or a single image); ``order`` names its fields, e.g. ``("image", "boxes",
"mask")``. A transform draws its random parameters once per sample (from numpy's global random
state, which each DataLoader worker seeds) and applies them consistently to every field:
``image`` (HWC), ``mask`` (HWC), ``coords`` (N x 2, x then y), ``boxes`` (N x 4, x0 y0 x1 y1),
``keypoints`` and ``polygons``; fields named ``*category`` or ``*info`` pass through."""

from __future__ import annotations

import collections.abc
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

import compiler.data.transform.vision.functional as F
from compiler.data.transform.meta_transform import Transform

__all__ = [
    "BrightnessTransform",
    "CenterCrop",
    "ColorJitter",
    "Compose",
    "ContrastTransform",
    "GaussianNoise",
    "HueTransform",
    "Lighting",
    "Normalize",
    "Pad",
    "RandomCrop",
    "RandomHorizontalFlip",
    "RandomResize",
    "RandomResizedCrop",
    "RandomVerticalFlip",
    "Resize",
    "SaturationTransform",
    "ShortestEdgeResize",
    "ToMode",
    "TorchTransformCompose",
    "VisionTransform",
]


def _pair(size: int | Sequence[int]) -> tuple[int, int]:
    return (size, size) if isinstance(size, int) else (int(size[0]), int(size[1]))


class VisionTransform(Transform):
    """Base of the vision transforms: dispatches each field of a sample to ``_apply_<kind>``."""

    def __init__(self, order: Sequence[str] | None = None) -> None:
        super().__init__()
        if order is None:
            order = ("image",)
        elif not isinstance(order, collections.abc.Sequence) or isinstance(order, str):
            raise ValueError(f"{type(self).__name__}: order must be a sequence of field names, got {order!r}")
        for key in order:
            if key == "batch":
                raise ValueError(f"{type(self).__name__}: 'batch' is not a sample field")
            if not (key.endswith("category") or key.endswith("info")) and self._get_apply(key) is None:
                raise NotImplementedError(f"{type(self).__name__}: field kind {key!r} is not supported")
        self.order = tuple(order)

    def apply_batch(self, inputs: Sequence[Any]) -> tuple[Any, ...]:
        return tuple(self.apply(sample) for sample in inputs)

    def apply(self, input: Any) -> Any:
        fields = input if isinstance(input, tuple) else (input,)
        out = []
        for i, value in enumerate(fields):
            fn = self._get_apply(self.order[i]) if i < len(self.order) else None
            out.append(value if fn is None else fn(value))
        return out[0] if len(out) == 1 else tuple(out)

    def _get_apply(self, key: str) -> Any:
        return getattr(self, f"_apply_{key}", None)

    def _get_image(self, input: Any) -> np.ndarray:
        fields = input if isinstance(input, tuple) else (input,)
        return fields[self.order.index("image")]

    def _apply_image(self, image: np.ndarray) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} does not transform images")

    def _apply_coords(self, coords: np.ndarray) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} does not transform coordinates")

    def _apply_mask(self, mask: np.ndarray) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} does not transform masks")

    def _apply_boxes(self, boxes: np.ndarray) -> np.ndarray:
        # transform the four corners; the new box is their bounding box
        boxes = np.asarray(boxes).reshape(-1, 4)
        corners = boxes[:, [0, 1, 2, 1, 0, 3, 2, 3]].reshape(-1, 2)
        corners = self._apply_coords(corners).reshape(-1, 4, 2)
        return np.concatenate((corners.min(axis=1), corners.max(axis=1)), axis=1)

    def _apply_keypoints(self, keypoints: np.ndarray) -> np.ndarray:
        coords, visibility = keypoints[..., :2], keypoints[..., 2:]
        moved = [self._apply_coords(p) for p in coords]
        return np.concatenate((moved, visibility), axis=-1)

    def _apply_polygons(self, polygons: list[list[np.ndarray]]) -> list[list[np.ndarray]]:
        return [[self._apply_coords(p) for p in instance] for instance in polygons]


class _Pointwise(VisionTransform):
    """A transform of pixel values only: geometry (coords, masks) is unchanged."""

    def _apply_coords(self, coords: np.ndarray) -> np.ndarray:
        return coords

    def _apply_mask(self, mask: np.ndarray) -> np.ndarray:
        return mask


class ToMode(VisionTransform):
    """HWC images and masks to ``mode`` (only ``"CHW"``)."""

    def __init__(self, mode: str = "CHW", *, order: Sequence[str] | None = None) -> None:
        super().__init__(order)
        if mode != "CHW":
            raise ValueError(f"ToMode: unsupported mode {mode!r} (only 'CHW')")
        self.mode = mode

    def _apply_image(self, image: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(np.moveaxis(image, 2, 0))

    def _apply_coords(self, coords: np.ndarray) -> np.ndarray:
        return coords

    def _apply_mask(self, mask: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(np.moveaxis(mask, 2, 0))


class Compose(VisionTransform):
    """Several transforms in sequence. ``shuffle_indices`` (1-based groups of positions) permutes
    each group randomly per sample; ``batch_compose`` applies each transform to the whole batch
    before the next (then no shuffling)."""

    def __init__(
        self,
        transforms: Sequence[VisionTransform] = (),
        batch_compose: bool = False,
        shuffle_indices: Sequence[Sequence[int]] | None = None,
        *,
        order: Sequence[str] | None = None,
    ) -> None:
        super().__init__(order)
        self.transforms = list(transforms)
        self._set_order()
        if batch_compose and shuffle_indices is not None:
            raise ValueError("Compose: shuffle_indices cannot be used with batch_compose")
        self.batch_compose = batch_compose
        self.shuffle_indices = (
            None if shuffle_indices is None else [tuple(i - 1 for i in group) for group in shuffle_indices]
        )

    def _set_order(self) -> None:
        for t in self.transforms:
            t.order = self.order
            if isinstance(t, Compose):
                t._set_order()

    def apply_batch(self, inputs: Sequence[Any]) -> tuple[Any, ...]:
        if not self.batch_compose:
            return super().apply_batch(inputs)
        for t in self.transforms:
            inputs = t.apply_batch(inputs)
        return tuple(inputs)

    def apply(self, input: Any) -> Any:
        for t in self._shuffle():
            input = t.apply(input)
        return input

    def _shuffle(self) -> list[VisionTransform]:
        if self.shuffle_indices is None:
            return self.transforms
        source = list(range(len(self.transforms)))
        for group in self.shuffle_indices:
            for dst, src in zip(group, np.random.permutation(group).tolist(), strict=True):
                source[dst] = src
        return [self.transforms[i] for i in source]


class TorchTransformCompose(VisionTransform):
    """torchvision transforms on PIL images: the BGR uint8 image goes to PIL as RGB and back."""

    def __init__(self, transforms: Any, *, order: Sequence[str] | None = None) -> None:
        super().__init__(order)
        self.transforms = transforms

    def _apply_image(self, image: np.ndarray) -> np.ndarray:
        try:
            from PIL import Image
        except ImportError as err:
            raise ImportError("TorchTransformCompose needs Pillow (pip install pillow)") from err
        rgb = Image.fromarray(np.ascontiguousarray(np.asarray(image, dtype=np.uint8)[..., ::-1]))
        out = self.transforms(rgb)
        return np.ascontiguousarray(np.asarray(out)[..., ::-1])


class Pad(VisionTransform):
    """Pad images by ``size``: an int (all four sides), ``(bottom, right)`` or ``(top, bottom,
    left, right)``; images take ``value``, masks ``mask_value``."""

    def __init__(
        self,
        size: int | Sequence[int] = 0,
        value: Any = 0,
        mask_value: int = 0,
        *,
        order: Sequence[str] | None = None,
    ) -> None:
        super().__init__(order)
        if isinstance(size, int):
            size = (size, size, size, size)
        elif isinstance(size, collections.abc.Sequence) and len(size) == 2:
            size = (0, size[0], 0, size[1])
        elif not (isinstance(size, collections.abc.Sequence) and len(size) == 4):
            raise ValueError(
                f"Pad: size must be an int, (bottom, right) or (top, bottom, left, right); got {size!r}"
            )
        if not isinstance(mask_value, int):
            raise ValueError(f"Pad: mask_value must be an int, got {mask_value!r}")
        self.size = tuple(size)
        self.value = value
        self.mask_value = mask_value

    def _apply_image(self, image: np.ndarray) -> np.ndarray:
        return F.pad(image, self.size, self.value)

    def _apply_coords(self, coords: np.ndarray) -> np.ndarray:
        coords[:, 0] += self.size[2]
        coords[:, 1] += self.size[0]
        return coords

    def _apply_mask(self, mask: np.ndarray) -> np.ndarray:
        return F.pad(mask, self.size, self.mask_value)


class _Resizing(VisionTransform):
    """Resizes to a shape each subclass picks per sample (``_target``)."""

    interpolation: int = F.INTER_LINEAR

    def _target(self, height: int, width: int) -> tuple[int, int]:
        raise NotImplementedError

    def apply(self, input: Any) -> Any:
        h, w = self._get_image(input).shape[:2]
        self._shape_info = (h, w, *self._target(h, w))
        return super().apply(input)

    def _apply_image(self, image: np.ndarray) -> np.ndarray:
        h, w, th, tw = self._shape_info
        return image if (h, w) == (th, tw) else F.resize(image, (th, tw), self.interpolation)

    def _apply_coords(self, coords: np.ndarray) -> np.ndarray:
        h, w, th, tw = self._shape_info
        if (h, w) != (th, tw):
            coords[:, 0] = coords[:, 0] * (tw / w)
            coords[:, 1] = coords[:, 1] * (th / h)
        return coords

    def _apply_mask(self, mask: np.ndarray) -> np.ndarray:
        h, w, th, tw = self._shape_info
        return mask if (h, w) == (th, tw) else F.resize(mask, (th, tw), F.INTER_NEAREST)


class Resize(_Resizing):
    """Resize to ``output_size`` (height, width); an int sets the shorter edge, keeping the
    aspect ratio."""

    def __init__(
        self,
        output_size: int | Sequence[int],
        interpolation: int = F.INTER_LINEAR,
        *,
        order: Sequence[str] | None = None,
    ) -> None:
        super().__init__(order)
        self.output_size = output_size
        self.interpolation = interpolation

    def _target(self, h: int, w: int) -> tuple[int, int]:
        if not isinstance(self.output_size, int):
            return _pair(self.output_size)
        size = self.output_size
        if min(h, w) == size:
            return h, w
        return (size, int(size * w / h)) if h < w else (int(size * h / w), size)


class ShortestEdgeResize(_Resizing):
    """Resize so the shorter edge is drawn from ``min_size`` (a range, or a choice with
    ``sample_style="choice"``), the longer edge at most ``max_size``."""

    def __init__(
        self,
        min_size: int | Sequence[int],
        max_size: int,
        sample_style: str = "range",
        interpolation: int = F.INTER_LINEAR,
        *,
        order: Sequence[str] | None = None,
    ) -> None:
        super().__init__(order)
        if sample_style not in ("range", "choice"):
            raise NotImplementedError(
                f"ShortestEdgeResize: sample_style {sample_style!r} (use 'range' or 'choice')"
            )
        self.sample_style = sample_style
        self.min_size = (min_size, min_size) if isinstance(min_size, int) else tuple(min_size)
        self.max_size = max_size
        self.interpolation = interpolation

    def _target(self, h: int, w: int) -> tuple[int, int]:
        if self.sample_style == "range":
            size = np.random.randint(self.min_size[0], self.min_size[1] + 1)
        else:
            size = np.random.choice(self.min_size)
        scale = size / min(h, w)
        th, tw = (size, scale * w) if h < w else (scale * h, size)
        if max(th, tw) > self.max_size:
            shrink = self.max_size / max(th, tw)
            th, tw = th * shrink, tw * shrink
        return int(round(th)), int(round(tw))


class RandomResize(_Resizing):
    """Resize by a factor drawn uniformly from ``scale_range``."""

    def __init__(
        self,
        scale_range: Sequence[float],
        interpolation: int = F.INTER_LINEAR,
        *,
        order: Sequence[str] | None = None,
    ) -> None:
        super().__init__(order)
        self.scale_range = scale_range
        self.interpolation = interpolation

    def _target(self, h: int, w: int) -> tuple[int, int]:
        scale = np.random.uniform(*self.scale_range)
        return int(round(h * scale)), int(round(w * scale))


class _Cropping(VisionTransform):
    """Crops the window ``_crop = (x, y, w, h)`` each subclass picks per sample."""

    def _window(self, image: np.ndarray) -> tuple[int, int, int, int]:
        raise NotImplementedError

    def apply(self, input: Any) -> Any:
        self._crop = self._window(self._get_image(input))
        return super().apply(input)

    def _apply_image(self, image: np.ndarray) -> np.ndarray:
        x, y, w, h = self._crop
        return image[y : y + h, x : x + w]

    def _apply_coords(self, coords: np.ndarray) -> np.ndarray:
        coords[:, 0] -= self._crop[0]
        coords[:, 1] -= self._crop[1]
        return coords

    def _apply_mask(self, mask: np.ndarray) -> np.ndarray:
        x, y, w, h = self._crop
        return mask[y : y + h, x : x + w]


class CenterCrop(_Cropping):
    """Crop ``output_size`` (height, width) from the centre."""

    def __init__(self, output_size: int | Sequence[int], *, order: Sequence[str] | None = None) -> None:
        super().__init__(order)
        self.output_size = _pair(output_size)

    def _window(self, image: np.ndarray) -> tuple[int, int, int, int]:
        h, w = image.shape[:2]
        th, tw = self.output_size
        # an AssertionError, as MegEngine's own check is an assertion
        assert th <= h and tw <= w, f"CenterCrop: output size {self.output_size} exceeds the image's {(h, w)}"
        return int(round((w - tw) / 2.0)), int(round((h - th) / 2.0)), tw, th


class RandomCrop(_Cropping):
    """Pad by ``padding_size`` (as :class:`Pad`), pad further (bottom/right) to at least
    ``output_size`` if needed, then crop ``output_size`` at a random place."""

    def __init__(
        self,
        output_size: int | Sequence[int],
        padding_size: int | Sequence[int] = 0,
        padding_value: Any = (0, 0, 0),
        padding_maskvalue: int = 0,
        *,
        order: Sequence[str] | None = None,
    ) -> None:
        super().__init__(order)
        self.output_size = _pair(output_size)
        self.padding_value = padding_value
        self.padding_maskvalue = padding_maskvalue
        self.pad = Pad(padding_size, padding_value, padding_maskvalue, order=self.order)

    def apply(self, input: Any) -> Any:
        self.pad.order = self.order
        return super().apply(self.pad.apply(input))

    def _window(self, image: np.ndarray) -> tuple[int, int, int, int]:
        self._h, self._w = image.shape[:2]
        th, tw = self.output_size
        x = np.random.randint(0, max(0, self._w - tw) + 1)
        y = np.random.randint(0, max(0, self._h - th) + 1)
        return x, y, tw, th

    def _grow(self, image: np.ndarray, value: Any) -> np.ndarray:
        th, tw = self.output_size
        return F.pad(image, (0, max(0, th - self._h), 0, max(0, tw - self._w)), value)

    def _apply_image(self, image: np.ndarray) -> np.ndarray:
        return super()._apply_image(self._grow(image, self.padding_value))

    def _apply_mask(self, mask: np.ndarray) -> np.ndarray:
        return super()._apply_mask(self._grow(mask, self.padding_maskvalue))


class RandomResizedCrop(_Cropping):
    """Crop a random area (fraction ``scale_range`` of the image, aspect ratio in
    ``ratio_range``; the centre crop after 10 failed draws) and resize it to ``output_size``."""

    def __init__(
        self,
        output_size: int | Sequence[int],
        scale_range: Sequence[float] = (0.08, 1.0),
        ratio_range: Sequence[float] = (3.0 / 4, 4.0 / 3),
        interpolation: int = F.INTER_LINEAR,
        *,
        order: Sequence[str] | None = None,
    ) -> None:
        super().__init__(order)
        self.output_size = _pair(output_size)
        if scale_range[0] > scale_range[1] or ratio_range[0] > ratio_range[1]:
            raise ValueError("RandomResizedCrop: scale_range and ratio_range must be (min, max)")
        self.scale_range = scale_range
        self.ratio_range = ratio_range
        self.interpolation = interpolation

    def _window(self, image: np.ndarray, attempts: int = 10) -> tuple[int, int, int, int]:
        height, width = image.shape[:2]
        area = height * width
        log_ratio = (math.log(self.ratio_range[0]), math.log(self.ratio_range[1]))
        for _ in range(attempts):
            target = np.random.uniform(*self.scale_range) * area
            aspect = math.exp(np.random.uniform(*log_ratio))
            w = int(round(math.sqrt(target * aspect)))
            h = int(round(math.sqrt(target / aspect)))
            if 0 < w <= width and 0 < h <= height:
                return np.random.randint(0, width - w + 1), np.random.randint(0, height - h + 1), w, h
        ratio = width / height
        if ratio < min(self.ratio_range):
            w, h = width, int(round(width / min(self.ratio_range)))
        elif ratio > max(self.ratio_range):
            w, h = int(round(height * max(self.ratio_range))), height
        else:
            w, h = width, height
        return (width - w) // 2, (height - h) // 2, w, h

    def _apply_image(self, image: np.ndarray) -> np.ndarray:
        return F.resize(super()._apply_image(image), self.output_size, self.interpolation)

    def _apply_coords(self, coords: np.ndarray) -> np.ndarray:
        x, y, w, h = self._crop
        coords[:, 0] = (coords[:, 0] - x) * self.output_size[1] / w
        coords[:, 1] = (coords[:, 1] - y) * self.output_size[0] / h
        return coords

    def _apply_mask(self, mask: np.ndarray) -> np.ndarray:
        return F.resize(super()._apply_mask(mask), self.output_size, F.INTER_NEAREST)


class _RandomFlip(VisionTransform):
    _axis = 1  # 1: columns (horizontal), 0: rows (vertical)

    def __init__(self, prob: float = 0.5, *, order: Sequence[str] | None = None) -> None:
        super().__init__(order)
        self.prob = prob

    def apply(self, input: Any) -> Any:
        self._flipped = np.random.random() < self.prob
        self._extent = self._get_image(input).shape[self._axis]
        return super().apply(input)

    def _apply_image(self, image: np.ndarray) -> np.ndarray:
        return F.flip(image, self._axis) if self._flipped else image

    def _apply_mask(self, mask: np.ndarray) -> np.ndarray:
        return F.flip(mask, self._axis) if self._flipped else mask

    def _apply_coords(self, coords: np.ndarray) -> np.ndarray:
        if self._flipped:
            coord = 0 if self._axis == 1 else 1
            coords[:, coord] = self._extent - coords[:, coord]
        return coords


class RandomHorizontalFlip(_RandomFlip):
    """Flip left-right with probability ``prob``."""

    _axis = 1


class RandomVerticalFlip(_RandomFlip):
    """Flip upside down with probability ``prob``."""

    _axis = 0


class Normalize(_Pointwise):
    """``(image - mean) / std`` per channel, in float32."""

    def __init__(self, mean: Any = 0.0, std: Any = 1.0, *, order: Sequence[str] | None = None) -> None:
        super().__init__(order)
        self.mean = np.array(mean, dtype=np.float32)
        self.std = np.array(std, dtype=np.float32)

    def _apply_image(self, image: np.ndarray) -> np.ndarray:
        return (image - self.mean) / self.std


class GaussianNoise(_Pointwise):
    """Add noise ``N(mean, std) * 255``, clipped to 0..255, in the image's dtype."""

    def __init__(self, mean: Any = 0.0, std: Any = 1.0, *, order: Sequence[str] | None = None) -> None:
        super().__init__(order)
        self.mean = np.array(mean, dtype=np.float32)
        self.std = np.array(std, dtype=np.float32)

    def _apply_image(self, image: np.ndarray) -> np.ndarray:
        noise = (np.random.normal(self.mean, self.std, image.shape) * 255).astype(np.float32)
        return np.clip(image + noise, 0, 255).astype(image.dtype)


class _Jitter(_Pointwise):
    """Blend with a reference by a factor drawn from ``[max(0, 1 - value), 1 + value]``."""

    _what = ""

    def __init__(self, value: float, *, order: Sequence[str] | None = None) -> None:
        super().__init__(order)
        if value < 0:
            raise ValueError(f"{type(self).__name__}: {self._what} value must be non-negative, got {value}")
        self.value = value

    def _reference(self, image: np.ndarray) -> Any:
        raise NotImplementedError

    def _apply_image(self, image: np.ndarray) -> np.ndarray:
        if self.value == 0:
            return image
        src = image.astype(np.float32)
        alpha = np.random.uniform(max(0, 1 - self.value), 1 + self.value)
        return (src * alpha + self._reference(src) * (1 - alpha)).clip(0, 255).astype(image.dtype)


class BrightnessTransform(_Jitter):
    """Scale the pixel values (blend with black)."""

    _what = "brightness"

    def _reference(self, image: np.ndarray) -> Any:
        return 0.0


class ContrastTransform(_Jitter):
    """Blend with the mean gray level."""

    _what = "contrast"

    def _reference(self, image: np.ndarray) -> Any:
        return F.to_gray(image).mean()


class SaturationTransform(_Jitter):
    """Blend with the gray image."""

    _what = "saturation"

    def _reference(self, image: np.ndarray) -> Any:
        return F.to_gray(image)


class HueTransform(_Pointwise):
    """Rotate the hue of a BGR image by a fraction drawn from ``[-value, value]`` of the circle."""

    def __init__(self, value: float, *, order: Sequence[str] | None = None) -> None:
        super().__init__(order)
        if not 0 <= value <= 0.5:
            raise ValueError(f"HueTransform: value must be in [0, 0.5], got {value}")
        self.value = value

    def _apply_image(self, image: np.ndarray) -> np.ndarray:
        if self.value == 0:
            return image
        hsv = F.bgr_to_hsv(image.astype(np.uint8))
        shift = np.uint8(int(np.random.uniform(-self.value, self.value) * 255) % 256)
        with np.errstate(over="ignore"):
            hsv[..., 0] += shift  # uint8 wrap-around is the rotation
        return F.hsv_to_bgr(hsv).astype(image.dtype)


class ColorJitter(VisionTransform):
    """Brightness, contrast, saturation and hue jitter, in a random order per sample."""

    def __init__(
        self,
        brightness: float = 0,
        contrast: float = 0,
        saturation: float = 0,
        hue: float = 0,
        *,
        order: Sequence[str] | None = None,
    ) -> None:
        super().__init__(order)
        parts: list[VisionTransform] = []
        if brightness != 0:
            parts.append(BrightnessTransform(brightness))
        if contrast != 0:
            parts.append(ContrastTransform(contrast))
        if saturation != 0:
            parts.append(SaturationTransform(saturation))
        if hue != 0:
            parts.append(HueTransform(hue))
        self.transforms = Compose(parts, shuffle_indices=[tuple(range(1, len(parts) + 1))], order=order)

    def apply(self, input: Any) -> Any:
        return self.transforms.apply(input)


class Lighting(_Pointwise):
    """AlexNet's PCA lighting noise with standard deviation ``scale`` (images in BGR order)."""

    # ImageNet's RGB eigenvectors with the rows reversed for BGR images
    _eigvec = np.array([[-0.5836, -0.6948, 0.4203], [-0.5808, -0.0045, -0.8140], [-0.5675, 0.7192, 0.4009]])
    _eigval = np.array([0.2175, 0.0188, 0.0045])

    def __init__(self, scale: float, *, order: Sequence[str] | None = None) -> None:
        super().__init__(order)
        if scale < 0:
            raise ValueError(f"Lighting: scale must be non-negative, got {scale}")
        self.scale = scale
        self.eigvec = self._eigvec.copy()
        self.eigval = self._eigval.copy()

    def _apply_image(self, image: np.ndarray) -> np.ndarray:
        if self.scale == 0:
            return image
        alpha = np.random.normal(scale=self.scale * 255, size=3)
        shifted = image.astype(np.float32) + self.eigvec.dot(alpha * self.eigval)
        return shifted.clip(0, 255).astype(image.dtype)
