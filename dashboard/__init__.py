"""Operator dashboard (Streamlit)."""
