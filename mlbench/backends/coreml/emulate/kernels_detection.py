"""``non_maximum_suppression`` (what coremltools' torch frontend makes of ``torchvision.ops.nms``).

As coremltools' op tests define it (TensorFlow's ``non_max_suppression`` per batch): boxes are
(x centre, y centre, width, height); a box's score is its best class score; in descending score order a
box over ``score_threshold`` is kept unless its IoU with a kept box is over ``iou_threshold`` (per class
with ``per_class_suppression``: the class is the best-scoring one). At most ``max_boxes`` are returned,
padded with zero boxes and scores and index -1; when none survives, the best-scoring box is returned.
"""

from __future__ import annotations

import torch

from mlbench.backends.coreml.emulate.registry import as_bool, as_float, as_int, kernel


def _iou(boxes: torch.Tensor) -> torch.Tensor:
    cx, cy, w, h = boxes.to(torch.float64).unbind(-1)
    left, right, bottom, top = cx - w / 2, cx + w / 2, cy - h / 2, cy + h / 2
    width = (torch.minimum(right[:, None], right[None]) - torch.maximum(left[:, None], left[None])).clamp(min=0)
    height = (torch.minimum(top[:, None], top[None]) - torch.maximum(bottom[:, None], bottom[None])).clamp(min=0)
    inter = width * height
    area = w * h
    return inter / (area[:, None] + area[None] - inter)


def _select(iou: torch.Tensor, order: list[int], scores: torch.Tensor, iou_threshold: float,
            score_threshold: float, limit: int) -> list[int]:
    kept: list[int] = []
    for i in order:
        if len(kept) == limit or float(scores[i]) <= score_threshold:
            continue
        if all(float(iou[i, j]) <= iou_threshold for j in kept):
            kept.append(i)
    return kept


@kernel("non_maximum_suppression")
def non_maximum_suppression(boxes, scores, iou_threshold, max_boxes, score_threshold=None,
                            per_class_suppression=False, **_):
    limit, iou_limit = as_int(max_boxes), as_float(iou_threshold)
    floor = float("-inf") if score_threshold is None else as_float(score_threshold)
    n, _count, classes = scores.shape
    out_boxes = torch.zeros(n, limit, 4, dtype=boxes.dtype)
    out_scores = torch.zeros(n, limit, classes, dtype=scores.dtype)
    out_indices = torch.full((n, limit), -1, dtype=torch.int32)
    valid = torch.zeros(n, dtype=torch.int32)
    for b in range(n):
        best, label = scores[b].max(dim=-1)
        order = sorted(range(len(best)), key=lambda i: -float(best[i]))  # stable: ties keep index order
        iou = _iou(boxes[b])
        if as_bool(per_class_suppression):
            chosen = []
            for c in sorted(set(label.tolist()), key=lambda c: order.index(int((label == c).nonzero()[0]))):
                chosen += _select(iou, [i for i in order if int(label[i]) == c], best, iou_limit, floor, limit)
            ids = sorted(chosen, key=order.index)[:limit]
        else:
            ids = _select(iou, order, best, iou_limit, floor, limit)
        if not ids:
            ids = [order[0]]
        index = torch.tensor(ids, dtype=torch.int64)
        out_boxes[b, :len(ids)] = boxes[b, index]
        out_scores[b, :len(ids)] = scores[b, index]
        out_indices[b, :len(ids)] = index.to(torch.int32)
        valid[b] = len(ids)
    return out_boxes, out_scores, out_indices, valid
