"""What leaves a run: the Hub-ready folder (`export`), its model card and pictures (`model_card`, `plots`), the ONNX
export (`onnx_export`, the export-onnx command) and the upload to the Hub (`hub`, the publish command)."""
