"""Warnings attributed to the user's line, also from inside a `tf.function`.

The line is the first frame outside TensorFlow, AutoGraph's generated code and
this package; a generated frame is mapped back to the line it was converted from.
"""

import os
import sys
import warnings

from compat_distribute import _tf

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_AUTOGRAPH_FILE = "__autograph_generated_file"


def _user_location():
    """(filename, lineno, module globals) of the user's line, or None.

    The first frame outside TensorFlow, AutoGraph's generated code and this
    package. A generated frame is mapped back to the line it was converted
    from (its globals are the converted function's own module's).
    """
    tf_module = sys.modules.get("tensorflow")
    tf_dir = os.path.dirname(tf_module.__file__) + os.sep if tf_module else None
    skipped = (_PACKAGE_DIR, tf_dir) if tf_dir else (_PACKAGE_DIR,)
    source_map = None
    frame = sys._getframe(1)  # pylint: disable=protected-access
    while frame is not None:
        filename = frame.f_code.co_filename
        if _AUTOGRAPH_FILE in os.path.basename(filename):
            if source_map is None:
                source_map = _tf.autograph_source_map()
            origin = source_map.get((filename, frame.f_lineno))
            if origin is not None:
                return origin[0], origin[1], frame.f_globals
        elif not filename.startswith(skipped):
            return filename, frame.f_lineno, frame.f_globals
        frame = frame.f_back
    return None


def warn_at_user_line(message, category):
    """`warnings.warn` attributed to the user's line, also inside a `tf.function`.

    Filters by module (`-W error::DeprecationWarning:mymodule`) match the
    user's module, and the once-per-line registry is that module's.
    """
    where = _user_location()
    if where is None:
        warnings.warn(message, category, stacklevel=4)  # past serve and __get__
        return
    filename, lineno, module_globals = where
    warnings.warn_explicit(
        message,
        category,
        filename,
        lineno,
        module=module_globals.get("__name__", "<string>"),
        registry=module_globals.setdefault("__warningregistry__", {}),
        # For the source line of a module imported by a loader. Not for
        # `python -c` (its loader raises ImportError for __main__'s source).
        module_globals=module_globals if module_globals.get("__spec__") else None,
    )
