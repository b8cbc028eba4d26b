"""Figures (PNG, matplotlib imported lazily with the Agg canvas, so importing interp stays light)."""

from interp.viz.layers import draw_layer_effects
from interp.viz.maps import bezier_toward, draw_map, draw_reconstruction, draw_route, node_positions

__all__ = ["bezier_toward", "draw_layer_effects", "draw_map", "draw_reconstruction", "draw_route", "node_positions"]
