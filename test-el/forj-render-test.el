;;; forj-render-test.el --- Results people read, records the model reads  -*- lexical-binding: t; -*-

;;; Commentary:

;; The chat's view against the real worker: every kind of result drawn
;; for reading (text and faces), the exact JSON kept and sent unchanged,
;; the read-only history, links and folds, saving and reopening,
;; forking, and moving between turns.

;;; Code:

(require 'ert)
(require 'forj-render-session)

(ert-deftest forj-test-render-requests-byte-identical ()
  "What the chat sends is byte for byte what it sent when the buffer was the record.
Each result the worker journaled is sent exactly as journaled."
  (let ((golden (with-temp-buffer
                  (insert-file-contents forj-render-session-golden)
                  (json-parse-string (buffer-string) :object-type 'plist)))
        (now (forj-render-session-requests)))
    (should (equal (plist-get now :fenced) (plist-get golden :fenced)))
    (should (equal (plist-get now :native) (plist-get golden :native)))))

(provide 'forj-render-test)
;;; forj-render-test.el ends here
