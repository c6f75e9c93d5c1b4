"""A real SGLang (0.5.17, on the GPU machine) or the stand-in, run as a project tool by
bench/real_engine.py: build.sh makes the engine bundle, gpu_run.py sets the engine up,
promises.py proves each promise against it, report.py judges and writes the table."""
