"""``asyncfl sweep``: a grid of scenario keys × seeds run in parallel, tabulated with confidence
intervals (docs/architecture.md §9). :mod:`.grid` expands and names the points, :mod:`.run`
records, runs and tabulates them."""
