;;; forj-diagnostics-test.el --- The editor's diagnostics, told to the model  -*- lexical-binding: t; -*-

;;; Commentary:

;; A real checker (flymake's byte-compile backend for Emacs Lisp, which
;; runs a real Emacs on the buffer's text), the real worker, a scripted
;; model: an edit that brings a new warning gets it back with its
;; result, and the `diagnostics' tool answers with what the checker says
;; now.

;;; Code:

(require 'ert)
(require 'flymake)
(require 'forj-loop)
(require 'forj-diagnostics)
(require 'forj-epc-test)
(require 'forj-chat-test)

(defconst forj-diagnostics-test--lib
  (concat ";;; lib.el --- A library  -*- lexical-binding: t; -*-\n"
          "(defun lib-one (x) (let ((unused 1)) x))\n"
          "(provide 'lib)\n")
  "A library whose one warning (an unused variable) is there before any edit.")

(defun forj-diagnostics-test--call (json)
  "A reply of the scripted model holding one tool call JSON."
  (list :text (concat "On it.\n\n" (forj-chat-test--block json))))

(defun forj-diagnostics-test--checked (file checker)
  "Visit FILE with CHECKER on (flymake's byte-compile backend, or none).
Return its buffer once the first check is over."
  (let ((buffer (find-file-noselect file)))
    (with-current-buffer buffer
      (when checker
        (setq-local flymake-diagnostic-functions '(elisp-flymake-byte-compile))
        (flymake-mode 1)
        (flymake-start nil t)
        (should (forj-test--wait-for
                 (lambda () (with-current-buffer buffer (forj-diagnostics--done-p 'flymake)))
                 30))))
    buffer))

(defmacro forj-diagnostics-test-with (checker replies &rest body)
  "Run BODY after a turn of REPLIES on a project with lib.el open under CHECKER.
`root' is the project, `record' the chat's record, `buffer' lib.el's."
  (declare (indent 2) (debug t))
  `(forj-test-with-project (list (cons "lib.el" forj-diagnostics-test--lib))
     (let ((trusted (default-value 'trusted-content))
           (buffer nil))
       (unwind-protect
           (progn
             ;; The user trusts this project's Lisp: flymake byte-compiles it.
             (setq-default trusted-content (list root))
             (setq buffer (forj-diagnostics-test--checked (expand-file-name "lib.el" root) ,checker))
             (let* ((script (forj-chat-test--script ,replies))
                    (forj-provider-scripted-delay 0.001)
                    (forj-diagnostics-wait-seconds 20)
                    (record nil))
               (unwind-protect
                   (with-temp-buffer
                     (let ((output (point-marker)))
                       (setq-local forj-tools-permission-mode "accept-edits")
                       (setq forj-session
                             (forj-session-create
                              :root root :root-confirmed t
                              :provider (list :name "test-script" :family 'scripted :script script)
                              :view-function (lambda (event &rest _)
                                               (pcase event
                                                 ('output output)
                                                 ('output-to nil)
                                                 ('draft "")))))
                       (forj-loop-send "Go.")
                       (should (forj-test--wait-for
                                (lambda () (eq (forj-session-state forj-session) 'idle)) 60))
                       (setq record (forj-session-record forj-session))
                       ,@body))
                 (delete-file script))))
         (setq-default trusted-content trusted)
         (when (buffer-live-p buffer)
           (with-current-buffer buffer (set-buffer-modified-p nil))
           (kill-buffer buffer))))))

(defun forj-diagnostics-test--result (record)
  "The last tool result of RECORD, parsed, as the model reads it."
  (let ((text (plist-get (cl-find "tool" record :key (lambda (e) (plist-get e :role)) :test #'equal
                                  :from-end t)
                         :text)))
    (should text)
    (should (string-match "```tool-result\n\\(.*\\)\n```" text))
    (json-parse-string (match-string 1 text) :object-type 'plist :array-type 'list)))

(defun forj-diagnostics-test--results (record)
  "The results of the last tool section of RECORD, parsed, by call id."
  (let ((text (plist-get (cl-find "tool" record :key (lambda (e) (plist-get e :role)) :test #'equal
                                  :from-end t)
                         :text))
        (start 0)
        (found nil))
    (while (string-match "```tool-result\n\\(.*\\)\n```" text start)
      (setq start (match-end 0))
      (let ((result (json-parse-string (match-string 1 text) :object-type 'plist :array-type 'list)))
        (push (cons (plist-get result :id) result) found)))
    (nreverse found)))

(ert-deftest forj-test-diagnostics-an-edit-that-brings-a-warning-gets-it-back-with-the-result ()
  "After an approved edit, the new warning of the edited region goes with the result.
The warning there before the edit, outside the region, is not repeated."
  (forj-diagnostics-test-with t
      (list (forj-diagnostics-test--call
             "{\"id\": \"r1\", \"name\": \"read_file\", \"args\": {\"path\": \"lib.el\"}}")
            (forj-diagnostics-test--call
             (json-serialize
              (list :id "e1" :name "edit"
                    :args (list :path "lib.el" :old_string "(provide 'lib)"
                                :new_string "(defun lib-two () (lib-undefined-xyz 3))\n(provide 'lib)"))))
            (list :text "Done."))
    (let* ((result (forj-diagnostics-test--result record))
           (told (plist-get result :editor_diagnostics)))
      (should (eq (plist-get result :ok) t))
      (should (= (length told) 1))
      (should (equal (plist-get (car told) :path) "lib.el"))
      (should (equal (plist-get (car told) :checker) "flymake"))
      (let ((new (plist-get (car told) :new)))
        (should (= (length new) 1))
        (should (equal (plist-get (car new) :severity) "warning"))
        (should (= (plist-get (car new) :line) 3))
        (should (string-match-p "lib-undefined-xyz" (plist-get (car new) :message))))
      ;; The user sees in the chat what the model was told.
      (should (cl-some (lambda (e) (string-match-p "checkers report new errors or warnings (1 in lib.el)"
                                                   (or (plist-get e :text) "")))
                       record)))))

(ert-deftest forj-test-diagnostics-two-edits-of-one-file-are-checked-once-and-told-with-the-last ()
  "A batch that edits one file twice: the file is checked once, after both.
The last edit's result carries what both brought; the first's nothing."
  (forj-diagnostics-test-with t
      (list (forj-diagnostics-test--call
             "{\"id\": \"r1\", \"name\": \"read_file\", \"args\": {\"path\": \"lib.el\"}}")
            (list :text (concat (forj-chat-test--block
                                 (json-serialize
                                  (list :id "e1" :name "edit"
                                        :args (list :path "lib.el" :old_string "(provide 'lib)"
                                                    :new_string "(defun lib-two () (lib-undefined-xyz 3))\n(provide 'lib)"))))
                                "\n"
                                (forj-chat-test--block
                                 (json-serialize
                                  (list :id "e2" :name "edit"
                                        :args (list :path "lib.el" :old_string "(provide 'lib)"
                                                    :new_string "(defun lib-three () (lib-undefined-abc 4))\n(provide 'lib)"))))))
            (list :text "Done."))
    (let* ((results (forj-diagnostics-test--results record))
           (first (cdr (assoc "e1" results)))
           (last (cdr (assoc "e2" results))))
      (should (eq (plist-get first :ok) t))
      (should (eq (plist-get last :ok) t))
      (should-not (plist-member first :editor_diagnostics))
      (let ((new (plist-get (car (plist-get last :editor_diagnostics)) :new)))
        (should (= (length new) 2))
        (should (string-match-p "lib-undefined-xyz" (plist-get (nth 0 new) :message)))
        (should (string-match-p "lib-undefined-abc" (plist-get (nth 1 new) :message)))))))

(ert-deftest forj-test-diagnostics-off-when-no-checker-runs ()
  "An edit of a file open with no checker on comes back without diagnostics."
  (forj-diagnostics-test-with nil
      (list (forj-diagnostics-test--call
             "{\"id\": \"r1\", \"name\": \"read_file\", \"args\": {\"path\": \"lib.el\"}}")
            (forj-diagnostics-test--call
             (json-serialize
              (list :id "e1" :name "edit"
                    :args (list :path "lib.el" :old_string "(provide 'lib)"
                                :new_string "(defun lib-two () (lib-undefined-xyz 3))\n(provide 'lib)"))))
            (list :text "Done."))
    (let ((result (forj-diagnostics-test--result record)))
      (should (equal (plist-get result :error) nil))
      (should (eq (plist-get result :ok) t))
      (should-not (plist-member result :editor_diagnostics)))))

(ert-deftest forj-test-diagnostics-tool-returns-the-files-current-diagnostics ()
  "The worker's diagnostics tool asks Emacs, which answers with the checker's report."
  (forj-diagnostics-test-with t
      (list (forj-diagnostics-test--call
             "{\"id\": \"d1\", \"name\": \"diagnostics\", \"args\": {\"path\": \"lib.el\"}}")
            (list :text "Done."))
    (let* ((result (forj-diagnostics-test--result record))
           (body (plist-get result :result)))
      (should (eq (plist-get result :ok) t))
      (should (equal (plist-get body :checker) "flymake"))
      (should (equal (plist-get body :path) "lib.el"))
      (let ((diags (plist-get body :diagnostics)))
        (should (cl-some (lambda (d) (and (equal (plist-get d :severity) "warning")
                                          (= (plist-get d :line) 2)
                                          (string-match-p "unused" (plist-get d :message))))
                         diags))))))

(ert-deftest forj-test-diagnostics-tool-on-a-file-with-no-checker-says-so ()
  "The diagnostics tool on a file with no checker answers null, saying why."
  (forj-diagnostics-test-with nil
      (list (forj-diagnostics-test--call
             "{\"id\": \"d1\", \"name\": \"diagnostics\", \"args\": {\"path\": \"lib.el\"}}")
            (list :text "Done."))
    (let* ((result (forj-diagnostics-test--result record))
           (body (plist-get result :result)))
      (should (eq (plist-get result :ok) t))
      (should (eq (plist-get body :checker) :null))
      (should (null (plist-get body :diagnostics)))
      (should (string-match-p "no checker" (plist-get body :note))))))

(ert-deftest forj-test-diagnostics-changed-lines-span-the-edit ()
  "The changed region runs from the first to the last line that differs."
  (should (equal (forj-diagnostics--changed-lines "a\nb\nc\n" "a\nB\nX\nc\n") '(2 . 3)))
  (should (equal (forj-diagnostics--changed-lines "a\nb\n" "a\nb\nc\n") '(3 . 3)))
  (should (null (forj-diagnostics--changed-lines "a\n" "a\n"))))

(provide 'forj-diagnostics-test)
;;; forj-diagnostics-test.el ends here
