"""quasi-jupyterlab: C-Lisp highlighting for the Quasi kernel, a prebuilt JupyterLab extension.

No Python runs: pip installs the files of `labextension/` (built by
scripts/build-labextension.sh) as data under share/jupyter/labextensions/quasi-jupyterlab.
This function is what `jupyter labextension develop` looks for.
"""


def _jupyter_labextension_paths():
    return [{"src": "labextension", "dest": "quasi-jupyterlab"}]
