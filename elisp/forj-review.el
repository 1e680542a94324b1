;;; forj-review.el --- Review and approve the tool calls of a batch  -*- lexical-binding: t; -*-

;; Copyright (C) 2026 The forj authors

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;; This program is distributed in the hope that it will be useful,
;; but WITHOUT ANY WARRANTY; without even the implied warranty of
;; MERCHANTABILITY or FITNESS FOR A PARTICULAR PURPOSE.  See the
;; GNU General Public License for more details.

;; You should have received a copy of the GNU General Public License
;; along with this program.  If not, see <https://www.gnu.org/licenses/>.

;;; Commentary:

;; When a batch has calls that need the user's consent, one review buffer
;; lists them all: each with its risk (high risk marked), its summary and,
;; for edits, the unified diff the worker will apply, across all files of
;; the batch in one place.  Nothing runs until the decisions are
;; committed; leaving the buffer without committing denies everything.
;;
;;   a  approve the call at point      d  deny it
;;   r  deny it with a reason (the model reads the reason)
;;   e  edit the proposed text in ediff, then approve it as edited
;;   A  approve all                    D  deny all
;;   C-c C-c  commit the decisions     q  deny all and commit
;;   C-g  cancel the batch: nothing runs, and a chat does not go on
;;
;; Editing before approving: `e' fetches the call's proposal from the
;; worker (the file as it is and as the call would leave it) and opens
;; both in ediff; the proposed side is editable.  When ediff quits, what
;; the proposed buffer holds is what will be written, and the result
;; tells the model the user modified the change and shows what was
;; written.
;;
;; The batch flow (forj-tools.el) opens this buffer and gets the
;; decisions back through a callback.

;;; Code:

(require 'cl-lib)
(require 'diff-mode)
(require 'forj)

(defface forj-review-high-risk
  '((t :inherit error :weight bold))
  "Face for the risk label of high-risk calls."
  :group 'forj)

(defface forj-review-approved
  '((t :inherit success :weight bold))
  "Face for an approved call's state."
  :group 'forj)

(defface forj-review-denied
  '((t :inherit warning :weight bold))
  "Face for a denied call's state."
  :group 'forj)

(defvar-local forj-review--items nil
  "The plan items under review, each a plist from the worker.")

(defvar-local forj-review--decisions nil
  "Hash table: call id -> t (approved) or (deny . REASON).")

(defvar-local forj-review--callback nil
  "Function called once with the decisions.
Its arguments: the approved ids, an alist of denied ids and reasons,
and an alist of modified ids, each with an alist of paths and the
text the user wants written there.")

(defvar-local forj-review--proposal-function nil
  "Function fetching a call's proposal, or nil when editing is not offered.
Called with the call id, a function to call with the list of files
\(plists with :path, :old, :new) and a function to call with an error
plist.")

(defvar-local forj-review--modified nil
  "Hash table: call id -> alist of (PATH . TEXT) the user wrote instead.")

(defvar forj-review-mode-map
  (let ((map (make-sparse-keymap)))
    (define-key map "a" #'forj-review-approve)
    (define-key map "d" #'forj-review-deny)
    (define-key map "r" #'forj-review-deny-with-reason)
    (define-key map "e" #'forj-review-edit)
    (define-key map "A" #'forj-review-approve-all)
    (define-key map "D" #'forj-review-deny-all)
    (define-key map "n" #'forj-review-next)
    (define-key map "p" #'forj-review-previous)
    (define-key map (kbd "C-c C-c") #'forj-review-commit)
    (define-key map "q" #'forj-review-quit)
    (define-key map (kbd "C-g") #'forj-review-cancel)
    map)
  "Keymap of `forj-review-mode'.")

(define-derived-mode forj-review-mode special-mode "forj-review"
  "Review the tool calls of a batch before anything runs.

\\{forj-review-mode-map}"
  (setq-local truncate-lines t)
  (add-hook 'kill-buffer-hook #'forj-review--deny-on-kill nil t))

(defun forj-review-open (items callback &optional proposal-function)
  "Show ITEMS (plan items needing confirmation) for review.
CALLBACK is called once, when the decisions are committed, with the
list of approved ids, an alist of denied ids and reasons, and an alist
of ids the user edited before approving, each with an alist of paths
and texts.  PROPOSAL-FUNCTION, if given, fetches a call's proposal for
editing (see `forj-review--proposal-function').  Return the review
buffer."
  (let ((buffer (generate-new-buffer "*forj-review*")))
    (with-current-buffer buffer
      (forj-review-mode)
      (setq forj-review--items items
            forj-review--decisions (make-hash-table :test #'equal)
            forj-review--modified (make-hash-table :test #'equal)
            forj-review--proposal-function proposal-function
            forj-review--callback callback)
      (forj-review--render)
      (goto-char (point-min))
      (forj-review-next))
    (pop-to-buffer buffer)
    buffer))

(defun forj-review--render ()
  "Draw the review buffer from its items and decisions."
  (let ((inhibit-read-only t)
        (line (line-number-at-pos)))
    (erase-buffer)
    (insert (substitute-command-keys
             "Review these tool calls.  \\<forj-review-mode-map>\\[forj-review-approve] approve, \\[forj-review-deny] deny, \\[forj-review-deny-with-reason] deny with a reason, \\[forj-review-edit] edit then approve, \\[forj-review-approve-all] / \\[forj-review-deny-all] all, \\[forj-review-commit] commit, \\[forj-review-quit] deny all.\n\n"))
    (dolist (item forj-review--items)
      (let* ((id (plist-get item :id))
             (decision (gethash id forj-review--decisions))
             (risk (or (plist-get item :risk) "low"))
             (start (point)))
        (insert (cond ((and (eq decision t) (gethash id forj-review--modified))
                       (propertize "[edited]  " 'face 'forj-review-approved))
                      ((eq decision t) (propertize "[approved]" 'face 'forj-review-approved))
                      (decision (propertize "[denied]  " 'face 'forj-review-denied))
                      (t "[        ]"))
                " "
                (propertize (format "%-6s" risk) 'face (if (equal risk "high") 'forj-review-high-risk 'bold))
                " " (plist-get item :summary) "\n")
        (when (and (consp decision) (cdr decision))
          (insert "    reason: " (cdr decision) "\n"))
        (when (and (eq decision t) (gethash id forj-review--modified))
          (insert "    you edited: "
                  (mapconcat #'car (gethash id forj-review--modified) ", ")
                  " (the diff below is the proposal; your text is what will be written)\n"))
        (when (plist-get item :preview_note)
          (insert "    " (plist-get item :preview_note) "\n"))
        (when (plist-get item :preview)
          (insert (forj-review--diff (plist-get item :preview))))
        (insert "\n")
        (put-text-property start (point) 'forj-review-id id)))
    (goto-char (point-min))
    (forward-line (1- line))))

(defun forj-review--diff (text)
  "TEXT indented; a unified diff is coloured with `diff-mode' faces.
Other previews (a command's argv, cwd and environment) stay plain."
  (if (not (string-match-p "\\`\\(?:--- \\|@@\\)" text))
      (mapconcat (lambda (line) (concat "    " line "\n")) (split-string text "\n" t) "")
    (forj-review--diff-lines text)))

(defun forj-review--diff-lines (text)
  "TEXT, a unified diff, indented and coloured with `diff-mode' faces."
  (mapconcat
   (lambda (line)
     (concat "    "
             (propertize line 'face
                         (cond ((string-prefix-p "+++" line) 'diff-file-header)
                               ((string-prefix-p "---" line) 'diff-file-header)
                               ((string-prefix-p "@@" line) 'diff-hunk-header)
                               ((string-prefix-p "+" line) 'diff-added)
                               ((string-prefix-p "-" line) 'diff-removed)
                               (t 'diff-context)))
             "\n"))
   (split-string text "\n" t)
   ""))

(defun forj-review--id-at-point ()
  "The id of the call at point, or signal."
  (or (get-text-property (point) 'forj-review-id)
      (user-error "No tool call at point")))

(defun forj-review-decide (id decision)
  "Record DECISION (t, or (deny . REASON)) for call ID, and redraw."
  (puthash id decision forj-review--decisions)
  (forj-review--render))

(defun forj-review-modify (id path text)
  "Approve call ID with TEXT written to PATH instead of its proposal."
  (let ((edits (assoc-delete-all path (copy-alist (gethash id forj-review--modified)))))
    (puthash id (append edits (list (cons path text))) forj-review--modified))
  (forj-review-decide id t))

(defun forj-review-approve ()
  "Approve the call at point."
  (interactive)
  (forj-review-decide (forj-review--id-at-point) t))

(defun forj-review-deny ()
  "Deny the call at point."
  (interactive)
  (forj-review-decide (forj-review--id-at-point) (cons 'deny nil)))

(defun forj-review-deny-with-reason (reason)
  "Deny the call at point and tell the model REASON."
  (interactive (list (read-string "Why deny this call? ")))
  (forj-review-decide (forj-review--id-at-point)
                      (cons 'deny (and (not (string-empty-p reason)) reason))))

(defun forj-review-approve-all ()
  "Approve every call."
  (interactive)
  (dolist (item forj-review--items) (puthash (plist-get item :id) t forj-review--decisions))
  (forj-review--render))

(defun forj-review-deny-all ()
  "Deny every call."
  (interactive)
  (dolist (item forj-review--items)
    (puthash (plist-get item :id) (cons 'deny nil) forj-review--decisions))
  (forj-review--render))

(defun forj-review-next ()
  "Move to the next call."
  (interactive)
  (let ((here (get-text-property (point) 'forj-review-id))
        (pos (point)))
    (while (and pos (equal (get-text-property pos 'forj-review-id) here))
      (setq pos (next-single-property-change pos 'forj-review-id)))
    (when (and pos (not (get-text-property pos 'forj-review-id)))
      (setq pos (next-single-property-change pos 'forj-review-id)))
    (when pos (goto-char pos))))

(defun forj-review-previous ()
  "Move to the previous call."
  (interactive)
  (let ((pos (previous-single-property-change (point) 'forj-review-id)))
    (when pos
      (goto-char pos)
      (unless (get-text-property (point) 'forj-review-id)
        (let ((start (previous-single-property-change (point) 'forj-review-id)))
          (when start (goto-char start)))))))

(defun forj-review-commit ()
  "Hand the decisions to the batch, denying what is undecided."
  (interactive)
  (let ((callback forj-review--callback)
        (approved nil)
        (denied nil))
    (dolist (item forj-review--items)
      (let* ((id (plist-get item :id))
             (decision (gethash id forj-review--decisions)))
        (if (eq decision t)
            (push id approved)
          (push (cons id (or (cdr-safe decision) "")) denied))))
    (let ((modified (cl-loop for id in approved
                             when (gethash id forj-review--modified)
                             collect (cons id (gethash id forj-review--modified)))))
      (setq forj-review--callback nil)
      (let ((buffer (current-buffer)))
        (quit-window nil (get-buffer-window buffer))
        (kill-buffer buffer))
      (when callback (funcall callback (nreverse approved) (nreverse denied) modified)))))

(defun forj-review-quit ()
  "Deny every call and commit."
  (interactive)
  (forj-review-deny-all)
  (forj-review-commit))

(defun forj-review-cancel ()
  "Cancel the whole batch: nothing is run, and a chat is not resumed."
  (interactive)
  (let ((callback forj-review--callback)
        (ids (mapcar (lambda (item) (cons (plist-get item :id) "")) forj-review--items)))
    (setq forj-review--callback nil)
    (let ((buffer (current-buffer)))
      (quit-window nil (get-buffer-window buffer))
      (kill-buffer buffer))
    (when callback (funcall callback nil ids nil t))))

(defun forj-review--deny-on-kill ()
  "Leaving the buffer without committing denies everything."
  (when forj-review--callback
    (let ((callback forj-review--callback))
      (setq forj-review--callback nil)
      (funcall callback nil (mapcar (lambda (item) (cons (plist-get item :id) ""))
                                    forj-review--items)
               nil))))

;;; Edit before approve

(defun forj-review-edit ()
  "Edit the proposed change of the call at point in ediff, then approve it.
The left side is the file as it is, the right side what the call
proposes; change the right side, then quit ediff (\`q') to approve
the call with your text.  Kill the proposed buffer instead to leave
the decision as it was."
  (interactive)
  (let ((id (forj-review--id-at-point))
        (review (current-buffer)))
    (unless forj-review--proposal-function
      (user-error "This review cannot fetch proposals to edit"))
    (message "forj: fetching the proposal of %s..." id)
    (funcall forj-review--proposal-function id
             (lambda (files)
               (when (buffer-live-p review)
                 (let ((file (if (cdr files)
                                 (let ((path (completing-read
                                              "Edit which file? "
                                              (mapcar (lambda (f) (plist-get f :path)) files)
                                              nil t)))
                                   (cl-find path files :key (lambda (f) (plist-get f :path))
                                            :test #'equal))
                               (car files))))
                   (message nil)
                   (forj-review--ediff review id file))))
             (lambda (err)
               (message "forj: cannot edit %s: %s" id (or (plist-get err :message) err))))))

(defvar-local forj-review--edit nil
  "In a proposed buffer: (REVIEW-BUFFER ID PATH PROPOSED-TEXT).")

(defun forj-review--mode-for (path)
  "The major mode `auto-mode-alist' gives PATH, or `fundamental-mode'."
  (let ((mode (assoc-default path auto-mode-alist #'string-match)))
    (when (consp mode) (setq mode (car mode)))
    (if (functionp mode) mode #'fundamental-mode)))

(defun forj-review-edit-buffers (review id file)
  "Make the current and proposed buffers of FILE (a proposal plist) of call ID.
REVIEW is the review buffer.  Return (CURRENT . PROPOSED); the
proposed buffer holds what the user edits, and
`forj-review-edit-finish' in it records the edit."
  (let* ((path (plist-get file :path))
         (mode (forj-review--mode-for path))
         (current (generate-new-buffer (format "*forj-current: %s*" path)))
         (proposed (generate-new-buffer (format "*forj-proposed: %s*" path))))
    (with-current-buffer current
      (insert (plist-get file :old))
      (ignore-errors (delay-mode-hooks (funcall mode)))
      (setq buffer-read-only t)
      (set-buffer-modified-p nil))
    (with-current-buffer proposed
      (insert (plist-get file :new))
      (ignore-errors (delay-mode-hooks (funcall mode)))
      (setq-local forj-review--edit (list review id path (plist-get file :new)))
      (set-buffer-modified-p nil)
      (goto-char (point-min)))
    (cons current proposed)))

(defun forj-review-edit-finish (proposed)
  "Record the text of the buffer PROPOSED as the user's text for its call.
An unchanged proposal is simply approved."
  (with-current-buffer proposed
    (pcase-let ((`(,review ,id ,path ,original) forj-review--edit)
                (text (buffer-substring-no-properties (point-min) (point-max))))
      (when (buffer-live-p review)
        (with-current-buffer review
          (if (equal text original)
              (forj-review-decide id t)
            (forj-review-modify id path text)))))))

(defun forj-review--ediff (review id file)
  "Open FILE of call ID in ediff; on quit, record the edit in REVIEW."
  (require 'ediff)
  (pcase-let ((`(,current . ,proposed) (forj-review-edit-buffers review id file)))
    (ediff-buffers
     current proposed
     (list (lambda ()
             (add-hook 'ediff-quit-hook
                       (lambda ()
                         (when (buffer-live-p proposed)
                           (forj-review-edit-finish proposed)
                           (kill-buffer proposed))
                         (when (buffer-live-p current) (kill-buffer current))
                         (when (buffer-live-p review) (pop-to-buffer review)))
                       ;; Run after ediff's own clean-up.
                       90 t))))))

(provide 'forj-review)
;;; forj-review.el ends here
