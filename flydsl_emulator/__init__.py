"""A CPU emulator of the FlyDSL gfx950 kernel (``kernel/flydsl_gfx950.py``), so its cases run
where no gfx950 device exists: stand-in flydsl modules (``fake_flydsl``) execute the kernel
body once per program, every runtime value a numpy array over the program's lanes
(``core``); an ``if`` on a lane-varying condition runs under an active-lane mask, as divergent
execution does (``transform``); every load and store is bounds-checked against the tensor it
addresses; the MFMA computes the product its lane map documents. ``op`` runs the module's own
host code with the launch emulated. Installing the stand-ins is refused once the real flydsl is
imported, so the emulator runs in a process of its own."""
