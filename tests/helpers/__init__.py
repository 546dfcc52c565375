"""What the tests share, by topic; fixtures are in ``conftest.py``.

- :mod:`profiles`: the hypothesis profiles (``HYPOTHESIS_PROFILE``) and ``examples(n)``.
- :mod:`asserts`: exact comparisons of tensors, trees and verdicts; ``on`` (a device move).
- :mod:`drafts`: configs and draft inputs, as hypothesis strategies and seeded tables.
- :mod:`trees`: hand-made trees and the targets that agree with them.
- :mod:`layouts`: an input in the memory layouts engines hand over; the no-write check.
- :mod:`reference`: the slow loop reference every torch path is compared with.
- :mod:`sampling_inputs`, :mod:`sampling_reference`: the same for sampled verification.
- :mod:`kernel_support`, :mod:`kernel_trees`, :mod:`kernel_probe`: the Triton kernel tests'
  devices, hard inputs and interpreter probe.
- :mod:`kernel_aot`, :mod:`kernel_aot_variants`: the sm_90 compile check, a script.
- :mod:`doc_blocks`, :mod:`doc_context`: the markdown pages' Python blocks, their markers and
  shown values; what their ``# given:`` fragments take from a caller.
- :mod:`doc_refs`, :mod:`doc_names`: what the docs name, and what it must resolve to.

No test module imports another; they import from here.
"""
