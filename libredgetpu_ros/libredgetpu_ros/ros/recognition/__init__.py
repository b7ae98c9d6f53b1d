"""The recognition node: place / object recognition from camera images by embedding similarity (node.py)."""
