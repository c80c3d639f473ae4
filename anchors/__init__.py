"""anchors."""
