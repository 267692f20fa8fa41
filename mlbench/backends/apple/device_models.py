"""Which chip an iPhone or iPad has, from the product type `devicectl` reports (`hardwareProperties.productType`,
e.g. `iPhone16,1`), so that records measured on a connected device, and calibration fitted to them, key on its
chip rather than on the Mac the phone is attached to.

Source: Apple's device identifiers with each model's chip as listed on Apple's own tech-specs pages
(support.apple.com/specs) and collected per identifier in "List of iPhone models" / "List of iPad models"
(en.wikipedia.org) and theapplewiki.com "Models". Confidence: high for the chip of a marketed model (Apple's
specs name it); medium for the identifier → model pairing, which Apple does not publish in one table.
Identifiers not listed here map to no chip: the record keeps the product type and says so.
"""

from __future__ import annotations

DEVICE_CHIPS: dict[str, tuple[str, str]] = {
    # iPhone: identifier → (marketing name, chip profile id in chips.yaml)
    "iPhone13,1": ("iPhone 12 mini", "a14"), "iPhone13,2": ("iPhone 12", "a14"),
    "iPhone13,3": ("iPhone 12 Pro", "a14"), "iPhone13,4": ("iPhone 12 Pro Max", "a14"),
    "iPhone14,4": ("iPhone 13 mini", "a15"), "iPhone14,5": ("iPhone 13", "a15"),
    "iPhone14,2": ("iPhone 13 Pro", "a15"), "iPhone14,3": ("iPhone 13 Pro Max", "a15"),
    "iPhone14,6": ("iPhone SE (3rd generation)", "a15"),
    "iPhone14,7": ("iPhone 14", "a15"), "iPhone14,8": ("iPhone 14 Plus", "a15"),
    "iPhone15,2": ("iPhone 14 Pro", "a16"), "iPhone15,3": ("iPhone 14 Pro Max", "a16"),
    "iPhone15,4": ("iPhone 15", "a16"), "iPhone15,5": ("iPhone 15 Plus", "a16"),
    "iPhone16,1": ("iPhone 15 Pro", "a17pro"), "iPhone16,2": ("iPhone 15 Pro Max", "a17pro"),
    "iPhone17,3": ("iPhone 16", "a18"), "iPhone17,4": ("iPhone 16 Plus", "a18"),
    "iPhone17,1": ("iPhone 16 Pro", "a18pro"), "iPhone17,2": ("iPhone 16 Pro Max", "a18pro"),
    # iPad
    "iPad13,1": ("iPad Air (4th generation)", "a14"), "iPad13,2": ("iPad Air (4th generation)", "a14"),
    "iPad13,18": ("iPad (10th generation)", "a14"), "iPad13,19": ("iPad (10th generation)", "a14"),
    "iPad14,1": ("iPad mini (6th generation)", "a15"), "iPad14,2": ("iPad mini (6th generation)", "a15"),
    "iPad13,16": ("iPad Air (5th generation)", "m1"), "iPad13,17": ("iPad Air (5th generation)", "m1"),
    **{f"iPad13,{n}": ("iPad Pro (M1)", "m1") for n in range(4, 12)},
    **{f"iPad14,{n}": ("iPad Pro (M2)", "m2") for n in range(3, 7)},
    **{f"iPad14,{n}": ("iPad Air (M2)", "m2") for n in range(8, 12)},
    **{f"iPad16,{n}": ("iPad Pro (M4)", "m4") for n in range(3, 7)},
    "iPad16,1": ("iPad mini (A17 Pro)", "a17pro"), "iPad16,2": ("iPad mini (A17 Pro)", "a17pro"),
}


def device_chip(product_type: str | None) -> tuple[str | None, str | None]:
    """(marketing name, chip profile id) of a product type; (None, None) for one not in the table."""
    return DEVICE_CHIPS.get(product_type or "", (None, None))
