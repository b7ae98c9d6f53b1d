"""The real control node with one injected fault, for the crash-handling test (run as a script).

``MatMulEngine.matmul_versioned`` raises ``RuntimeError`` for a state whose first value is ``POISON``: an
unexpected fault inside the state loop, which must take the node through ``on_error``, not end the loop
thread silently. Everything else is the unmodified node (its ``main()``).
"""

from __future__ import annotations

import sys

import numpy as np

POISON = 0.875  # exact in float32 and inside the template's input range


def main() -> int:
    from libredgetpu_ros.matmul.engine import MatMulEngine
    from libredgetpu_ros.ros.control_node import main as node_main

    original = MatMulEngine.matmul_versioned

    def faulty(self: MatMulEngine, x: object) -> tuple[np.ndarray, int]:
        if np.asarray(x).reshape(-1)[0] == POISON:
            raise RuntimeError("injected fault in the state loop")
        return original(self, x)

    MatMulEngine.matmul_versioned = faulty  # type: ignore[method-assign]
    return node_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
