"""Old home of ``forget_user``: :mod:`memlane.longterm.forget_user` holds it now."""

from memlane.longterm.forget_user import ForgetReport, UserEraser

__all__ = ["ForgetReport", "UserEraser"]
