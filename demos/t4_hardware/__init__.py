"""T4: hardware targets, data-center vs edge (spec rooflines, batch regime, deployment footprint, real-time video)."""
