"""Simulated machines for the draft-model and chain tests: a forward's cost by window size, with the shapes
of a CPU and a GPU."""


def machine(step_s, shape):
    """A forward's cost on a simulated machine: step_s times the shape, linear between its points."""
    points = sorted(shape.items())

    def window(n):
        for (a, ca), (b, cb) in zip(points, points[1:], strict=False):
            if n <= b:
                return step_s * (ca + (cb - ca) * (n - a) / (b - a))
        return step_s * points[-1][1]

    return window


CPU_SHAPE = {1: 1.0, 2: 1.6, 3: 2.1, 5: 2.5, 9: 5.5, 17: 6.8, 65: 20.0}
GPU_SHAPE = {1: 1.0, 65: 1.64}
