"""The Ray runtime: rayrl's plain classes as Ray actors, driven by one small event loop.

- `address`, `connect`: joining a cluster or starting a local Ray, and stopping it;
- `capacity`: the pre-flight, refusing a run the cluster can never host;
- `experience_service`, `learner_service`: the process shells around the experience store
  and the learner;
- `factory`: the one place where classes become actors (`ray.remote`), with their options;
- `dispatcher`: the outstanding calls, and the incarnation guard;
- `probe`: liveness probes, telling a hung actor from one waiting on another;
- `workers`, `learners`, `store`, `evaluator`: one supervisor per kind of actor;
- `driver_evaluator`: the evaluator on a thread of the driver's process (a small machine);
- `driver`: the event loop over them;
- `runtime`: `train_ray`, the Ray runtime's entry point.

This package's `__init__` imports nothing, so that an actor whose class lives here (the
experience store's) does not import what the driver needs (torch, the algorithms).
"""
