;;; prompt-bench.el --- A chat's first request to a local model, in batch  -*- lexical-binding: t; -*-

;;; Commentary:

;; Run by bench/prompt.py with $FORJ_PYTHON, $FORJ_BENCH_ROOT (a
;; project), $FORJ_BENCH_URL (an OpenAI-compatible server: the bench's
;; recording proxy), $FORJ_BENCH_WINDOW (the model's window, in
;; tokens, or empty to ask the server), $FORJ_BENCH_TOOLS (core or
;; all) and $FORJ_BENCH_NATIVE (1: native function calling; else the
;; tools in the system prompt, for fenced blocks).  A bare session (no
;; window, no chat mode) sends one user message through the loop, as a
;; chat does.  Prints one JSON line per notice the user would see, then
;; "reply JSON" with the last entry of the record.

;;; Code:

(require 'forj-loop)
(require 'forj-chat)

(let* ((forj-worker-python (getenv "FORJ_PYTHON"))
       (root (file-name-as-directory (getenv "FORJ_BENCH_ROOT")))
       (window (getenv "FORJ_BENCH_WINDOW"))
       (forj-chat-tool-set (intern (getenv "FORJ_BENCH_TOOLS")))
       (forj-compact-threshold nil)
       (provider (append (list :name "llama.cpp" :family 'openai :model "bench"
                               :url (getenv "FORJ_BENCH_URL") :local t :max-tokens 200
                               :native-tools (equal (getenv "FORJ_BENCH_NATIVE") "1"))
                         (and (not (string-empty-p window))
                              (list :context-window (string-to-number window)))))
       (notices nil))
  (advice-add 'forj-session-notice :before (lambda (text) (push text notices)))
  (with-temp-buffer
    (setq forj-session
          (forj-session-create :root root :root-confirmed t :provider provider
                               :view-function (let ((out (point-marker)))
                                                (lambda (event &rest _)
                                                  (pcase event
                                                    ('output out)
                                                    ('output-to nil)
                                                    ('draft ""))))))
    (forj-loop-send "The test in tests/test_app.py fails.  Find out why and fix it.")
    (let ((deadline (+ (float-time) 300)))
      (while (and (not (eq (forj-session-state forj-session) 'idle)) (< (float-time) deadline))
        (accept-process-output nil 0.05)))
    (dolist (notice (reverse notices))
      (princ (concat "notice " (json-serialize notice) "\n")))
    (princ (concat "reply " (json-serialize (plist-get (car (last (forj-session-record forj-session))) :text))
                   "\n")))
  (forj-worker-stop root))

;;; prompt-bench.el ends here
