"""Pictures of reachability: ``matrix`` and ``diff`` in other tools' formats (csv, Markdown,
Graphviz dot/svg) and one self-contained HTML report (``pyclassify report``).

Everything drawn comes from the exact identity-group table of ``pyclassify.reachability``: a
namespace cell is its groups' pods counted, a pod cell is its group's cell, and a click's
explanation is the decision the engine recorded for the group pair's representative flow.
"""
